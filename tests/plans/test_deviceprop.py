"""Device properties without a GPU: argument checks, the pygraph wiring, and the lowering
of a graph given properties (no handle), up to where a GPU is needed."""

from __future__ import annotations

import inspect

import pytest

import cudnn
from cudnn.backend import deviceprop
from cudnn.backend.deviceprop import DeviceProperties, check_json


def test_signature_is_the_official_one_positional() -> None:
    params = list(inspect.signature(cudnn.create_device_properties).parameters.values())
    assert params[0].kind == inspect.Parameter.POSITIONAL_ONLY and params[0].default is inspect.Parameter.empty
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in params[1:])


@pytest.mark.parametrize("bad", [None, 1.5, [0], True, object()])
def test_wrong_type_is_refused_naming_what_is_expected(bad: object) -> None:
    with pytest.raises(TypeError, match="create_device_properties: expected a device id"):
        cudnn.create_device_properties(bad)  # type: ignore[arg-type]


def test_negative_device_id_is_refused() -> None:
    with pytest.raises(ValueError, match="device_id must be >= 0, got -1"):
        cudnn.create_device_properties(-1)


@pytest.mark.parametrize("text, match", [("not json", "not valid JSON"), ("[1, 2]", "expected a JSON object"),
                                         ("{}", "expected a JSON object"), (b"\xff\xfe", "not UTF-8")])
def test_bad_json_is_refused_before_cudnn(text: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cudnn.create_device_properties(text)  # type: ignore[arg-type]


def test_json_text_is_kept_as_given_without_trailing_nul() -> None:
    assert check_json('{"deviceVer": 900}\0') == '{"deviceVer": 900}'
    assert check_json(b'{"deviceVer": 900}\0') == '{"deviceVer": 900}'


def test_handle_applies_only_to_a_device_id() -> None:
    with pytest.raises(TypeError, match="handle= applies to a device id"):
        cudnn.create_device_properties('{"deviceVer": 900}', handle=1)


def test_the_version_gate_names_9_8(monkeypatch: pytest.MonkeyPatch) -> None:
    class Old:
        version = 90700

    monkeypatch.setattr(deviceprop.loader, "report", lambda: Old())
    with pytest.raises(cudnn.FeatureUnavailableError, match=r"needs cuDNN >= 9\.8\.0; the loaded libcudnn is 9\.7\.0"):
        cudnn.create_device_properties('{"deviceVer": 900}')


class _Desc:
    """Stands for a finalized DEVICEPROP descriptor whose JSON cuDNN wrote (the descriptor itself
    needs a GPU to finalize); only what DeviceProperties reads."""

    finalized, closed = True, False

    def __init__(self, text: str) -> None:
        self.text = text

    def get_array(self, attr: object, attr_type: object) -> list[str]:
        return [self.text]


def test_sm_version_and_identity_come_from_the_json() -> None:
    props = DeviceProperties(_Desc('{"deviceVer": 900, "smCount": 132}'))  # type: ignore[arg-type]
    assert props.sm_version == 90 and props.identity() == ("", [9, 0])
    named = DeviceProperties(_Desc('{"deviceVer": 1000, "deviceName": "B200"}'))  # type: ignore[arg-type]
    assert named.identity() == ("B200", [10, 0])
    assert DeviceProperties(_Desc("junk")).sm_version is None  # type: ignore[arg-type]


def test_pygraph_takes_device_properties_and_their_sm_version() -> None:
    props = DeviceProperties(_Desc('{"deviceVer": 900}'))  # type: ignore[arg-type]
    g = cudnn.pygraph(device_property=props)
    assert g.device_property is props and g.sm_version == 90
    assert cudnn.pygraph(device_property=props, sm_version=100).sm_version == 100
    with pytest.raises(TypeError, match="pygraph: device_property: expected the object cudnn.create_device_properties"):
        cudnn.pygraph(device_property=[1])
    with pytest.raises(TypeError, match="pygraph: sm_version: expected an int, got '90'"):
        cudnn.pygraph(sm_version="90")


def test_a_graph_with_properties_builds_without_a_handle() -> None:
    """The operation graph and plans of a graph given properties and no handle are made with
    no handle (the official ahead-of-time path); one given a handle keeps it."""
    props = DeviceProperties(_Desc('{"deviceVer": 900}'))  # type: ignore[arg-type]
    g = cudnn.pygraph(device_property=props)
    p = g._pipeline
    assert p.build_handle_ptr() == 0
    assert p.device_property() is props.descriptor
    assert p.planset().device_property is props.descriptor
