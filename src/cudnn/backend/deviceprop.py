"""Device properties (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, cuDNN >= 9.8): what a GPU is, as
cuDNN sees it, in a form that can be written out and read back.

``create_device_properties(device_id)`` describes a GPU of this machine;
``create_device_properties(json)`` rebuilds the description that ``serialize()`` wrote, on any
machine. Given to ``pygraph(device_property=...)``, the heuristics, engines and execution plans
are asked for that device, which is how a plan is built ahead of time for a GPU that is absent.
"""

from __future__ import annotations

import json
from typing import Any

from .._lib import loader
from .._lib.attributes import A
from .._lib.enums import cudnnBackendAttributeType_t as T
from .._lib.enums import cudnnBackendDescriptorType_t as D
from .._lib.status import FeatureUnavailableError
from .descriptor import Descriptor
from .handle import Handle, as_handle_ptr

DEVICEPROP_SINCE = 90800
_WHAT = "create_device_properties"


class DeviceProperties:
    """A finalized DEVICEPROP descriptor and its JSON. Made by ``cudnn.create_device_properties``."""

    __slots__ = ("_desc", "_json", "device_id")

    def __init__(self, desc: Descriptor, device_id: int | None = None) -> None:
        self._desc = desc
        self._json: str | None = None
        self.device_id = device_id  # the local GPU it describes; None when rebuilt from JSON

    @property
    def descriptor(self) -> Descriptor:
        """The finalized backend descriptor (what heuristics, engines and plans are given)."""
        return self._desc

    def serialize(self) -> str:
        """The device as cuDNN's JSON text (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION); feed it
        to ``create_device_properties`` on any machine to describe this GPU there."""
        if self._json is None:
            values = self._desc.get_array(A.CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, T.CUDNN_TYPE_CHAR)
            self._json = values[0] if values else ""
        return self._json

    def fields(self) -> dict[str, Any]:
        """The JSON as a dict (empty if cuDNN's text is not a JSON object)."""
        try:
            raw = json.loads(self.serialize())
        except json.JSONDecodeError:
            return {}
        return raw if isinstance(raw, dict) else {}

    @property
    def sm_version(self) -> int | None:
        """The compute capability as the frontend writes it (90 for sm_90), from the JSON's
        ``deviceVer`` (900 for sm_90); None when the JSON does not carry it."""
        ver = self.fields().get("deviceVer")
        return int(ver) // 10 if isinstance(ver, int) and not isinstance(ver, bool) else None

    def identity(self) -> tuple[str, list[int]]:
        """(device name, [major, minor]) as a serialized plan records its GPU: the name is the
        JSON's when it carries one, else "" (plans are then matched by architecture alone)."""
        fields = self.fields()
        name = next((fields[k] for k in ("deviceName", "name", "device_name") if isinstance(fields.get(k), str)), "")
        sm = self.sm_version or 0
        return name, [sm // 10, sm % 10]

    def close(self) -> None:
        self._desc.close()

    def __repr__(self) -> str:
        where = f"device {self.device_id}" if self.device_id is not None else "from JSON"
        sm = self.sm_version if self._desc.finalized and not self._desc.closed else None
        return f"<cudnn.device_properties {where}{f' sm_{sm}' if sm else ''}>"


def _require_version() -> None:
    version = loader.report().version
    if version < DEVICEPROP_SINCE:
        raise FeatureUnavailableError(f"{_WHAT}: CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR", DEVICEPROP_SINCE, version)


def check_json(text: Any) -> str:
    """The JSON text of a device description, checked to be a JSON object (as ``serialize()``
    writes); raises TypeError / ValueError naming what is wrong."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).rstrip(b"\0").decode()
        except UnicodeDecodeError:
            raise ValueError(f"{_WHAT}(json): the bytes are not UTF-8 text") from None
    if not isinstance(text, str):
        raise TypeError(f"{_WHAT}: expected a device id (int) or the JSON str that serialize() returns, "
                        f"got {type(text).__name__}")
    text = text.rstrip("\0")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{_WHAT}(json): not valid JSON ({exc}); pass the str that "
                         "device_properties.serialize() returns") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{_WHAT}(json): expected a JSON object describing a device, got {text[:80]!r}")
    return text


def create_device_properties(source: int | str | bytes | bytearray, /, *,
                             handle: Handle | int | None = None) -> DeviceProperties:
    """``create_device_properties(device_id)``: the properties of a GPU of this machine.
    ``create_device_properties(json)``: the properties ``serialize()`` wrote, on any machine
    (no GPU needed where the backend allows it). ``handle`` (optional) ties a device-id
    description to a cuDNN handle (CUDNN_ATTR_DEVICEPROP_HANDLE)."""
    if isinstance(source, DeviceProperties):
        return source
    if isinstance(source, bool):
        raise TypeError(f"{_WHAT}: expected a device id (int) or a JSON str, got {source!r}")
    if hasattr(source, "__index__"):
        device_id = int(source)
        if device_id < 0:
            raise ValueError(f"{_WHAT}: device_id must be >= 0, got {device_id}")
        _require_version()
        desc = Descriptor(D.CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, f"{_WHAT}({device_id})")
        desc.set(A.CUDNN_ATTR_DEVICEPROP_DEVICE_ID, device_id, T.CUDNN_TYPE_INT32)
        if handle is not None:
            desc.set(A.CUDNN_ATTR_DEVICEPROP_HANDLE, as_handle_ptr(handle), T.CUDNN_TYPE_HANDLE)
        return DeviceProperties(desc.finalize(), device_id)
    if handle is not None:
        raise TypeError(f"{_WHAT}(json): handle= applies to a device id, not to a JSON description")
    text = check_json(source)
    _require_version()
    desc = Descriptor(D.CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, f"{_WHAT}(json)")
    desc.set(A.CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, text.encode() + b"\0", T.CUDNN_TYPE_CHAR)
    return DeviceProperties(desc.finalize())


def as_device_properties(value: Any, what: str = "device_property") -> DeviceProperties | None:
    """``pygraph(device_property=...)``: None, a DeviceProperties, or what makes one (an id, JSON)."""
    if value is None or isinstance(value, DeviceProperties):
        return value
    if isinstance(value, (str, bytes, bytearray)) or (hasattr(value, "__index__") and not isinstance(value, bool)):
        return create_device_properties(value)
    raise TypeError(f"{what}: expected the object cudnn.create_device_properties() returns (or None), "
                    f"got {type(value).__name__}")
