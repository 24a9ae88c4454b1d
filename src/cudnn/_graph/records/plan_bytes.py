"""Built plans as bytes: what ``serialize()`` writes and ``deserialize()`` and the plan cache read.

A record holds the backend's JSON of the execution plan, the plan's name and workspace,
the non-virtual tensors (uid, dims, strides, type, by-value constant, ragged offset, and for a
slice read in place the tensor and byte offset it is a window into) needed to check and bind
buffers, the scratch the graph carves from the workspace (place, size, what fills it), and
what the plan is valid for: the cuDNN version and the GPU. A graph made only to run the plan
binds from the record alone. A record from another cuDNN or GPU is refused, never used silently.
"""

from __future__ import annotations

import json
from typing import Any

from ..._lib import loader
from ..._lib.enums import data_type
from ..._lib.record import Record
from ..._lib.status import version_string
from ..model.graph_errors import SerializationError, SerializationNotSupportedError
from ..model.tensor import Tensor, constant

FORMAT = "cudnn-py-plan"
FORMAT_VERSION = 1


class TensorRecord(Record):
    """A non-virtual tensor of a plan: what binds and checks its buffer. ``ragged_offset_uid`` is
    the uid of its ragged offset (a packed THD tensor); a slice read in place is a window
    ``window_offset`` bytes into the buffer of the tensor ``window_uid`` (`Tensor.make_window`);
    an ``unused`` tensor is one of the graph the plan does not read (accepted at execute, not given)."""

    __slots__ = ("uid", "name", "dim", "stride", "data_type", "is_pass_by_value", "value", "node", "port",
                 "ragged_offset_uid", "window_uid", "window_offset", "unused")

    def __init__(self, uid: int, name: str, dim: list[int], stride: list[int], data_type: str,
                 is_pass_by_value: bool, value: float | int | None, node: str, port: str,
                 ragged_offset_uid: int | None = None, window_uid: int | None = None, window_offset: int = 0,
                 unused: bool = False) -> None:
        self.uid, self.name, self.dim, self.stride, self.data_type = uid, name, dim, stride, data_type
        self.is_pass_by_value, self.value, self.node, self.port = is_pass_by_value, value, node, port
        self.ragged_offset_uid, self.window_uid, self.window_offset = ragged_offset_uid, window_uid, window_offset
        self.unused = unused

    def tensor(self) -> Tensor:
        t = constant(self.name, self.value) if self.value is not None else Tensor(self.name)
        t.set_dim(self.dim).set_stride(self.stride).set_data_type(data_type[self.data_type])
        return t.set_is_pass_by_value(self.is_pass_by_value).set_uid(self.uid)


def record_tensors(records: list[TensorRecord]) -> list[Tensor]:
    """The tensors of ``records`` in order, each ragged one given its offset tensor back and
    each window its source."""
    tensors = [r.tensor() for r in records]
    by_uid = {t.get_uid(): t for t in tensors}
    for r, t in zip(records, tensors):
        offset = by_uid.get(r.ragged_offset_uid) if r.ragged_offset_uid is not None else None
        if offset is not None:
            t.set_ragged_offset(offset)
        if r.window_uid is not None:
            source = by_uid.get(r.window_uid)
            if source is None:
                raise SerializationError(f"serialized plan is damaged: tensor {r.name!r} (uid {r.uid}) is a window "
                                         f"into uid {r.window_uid}, which the plan does not bind")
            t.make_window(source, r.window_offset)
    return tensors


class ScratchRecord(Record):
    """A scratch tensor's place in the workspace and what is written there before each execute
    (`execute.ScratchSlot`): host bytes (hex) to copy, or zeros; ``constant``: in the Runner's
    constant memory instead, written once (absent from records written before it existed)."""

    __slots__ = ("uid", "offset", "nbytes", "fill", "zero", "constant")

    def __init__(self, uid: int, offset: int, nbytes: int, fill: str | None = None, zero: bool = False,
                 constant: bool = False) -> None:
        self.uid, self.offset, self.nbytes, self.fill, self.zero = uid, offset, nbytes, fill, zero
        self.constant = constant


class PlanRecord(Record):
    """A built plan: its name, cuDNN's JSON of it and its workspace, the tensors and scratch it
    binds (scratch in workspace order; ``scratch_bytes`` is the workspace the scratch takes,
    before the plan's own), and the cuDNN and GPU it was made by."""

    __slots__ = ("plan_name", "plan_json", "workspace", "tensors", "cudnn_version", "device_name",
                 "compute_capability", "autotuned", "graph_key", "format", "format_version", "extra", "scratch",
                 "scratch_bytes")

    def __init__(self, plan_name: str, plan_json: str, workspace: int, tensors: list[TensorRecord],
                 cudnn_version: int, device_name: str, compute_capability: list[int], autotuned: bool = False,
                 graph_key: str = "", format: str = FORMAT, format_version: int = FORMAT_VERSION,
                 extra: dict[str, Any] | None = None, scratch: list[ScratchRecord] | None = None,
                 scratch_bytes: int = 0) -> None:
        self.plan_name, self.plan_json, self.workspace, self.tensors = plan_name, plan_json, workspace, tensors
        self.cudnn_version, self.device_name, self.compute_capability = cudnn_version, device_name, compute_capability
        self.autotuned, self.graph_key, self.format, self.format_version = autotuned, graph_key, format, format_version
        self.extra: dict[str, Any] = {} if extra is None else extra
        self.scratch: list[ScratchRecord] = [] if scratch is None else scratch
        self.scratch_bytes = scratch_bytes

    def to_bytes(self) -> bytes:
        raw = self.as_dict()
        raw["tensors"] = [t.as_dict() for t in self.tensors]
        raw["scratch"] = [s.as_dict() for s in self.scratch]
        return json.dumps(raw, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | str | list[int]) -> PlanRecord:
        if isinstance(data, list):
            data = bytes(data)
        text = data.decode(errors="replace") if isinstance(data, (bytes, bytearray)) else str(data)
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SerializationError(f"not a serialized cudnn-py plan (invalid JSON: {exc})") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            if isinstance(raw, dict) and "nodes" in raw and "tensors" in raw:
                raise SerializationError("this is a graph's JSON (print(graph)), not a serialized plan: "
                                         "deserialize the bytes that graph.serialize() returns")
            raise SerializationError("not a serialized cudnn-py plan (no 'format' marker)")
        if raw.get("format_version") != FORMAT_VERSION:
            raise SerializationNotSupportedError(f"serialized plan format {raw.get('format_version')} is not "
                                                 f"{FORMAT_VERSION}; rebuild and serialize again")
        try:
            raw["tensors"] = [TensorRecord(**t) for t in raw["tensors"]]
            raw["scratch"] = [ScratchRecord(**s) for s in raw.get("scratch", [])]
            return cls(**raw)
        except (TypeError, KeyError) as exc:
            raise SerializationError(f"serialized plan is incomplete or damaged: {exc}") from None

    def check_compatible(self, device: int) -> None:
        """Raise SerializationError unless this record was made by this cuDNN on this GPU."""
        version = loader.report().version
        if self.cudnn_version != version:
            raise SerializationNotSupportedError("the plan was serialized with cuDNN "
                                                 f"{version_string(self.cudnn_version)}; this process runs "
                                                 f"cuDNN {version_string(version)}: rebuild it")
        here = device_identity(device)
        # a plan built ahead of time from device properties without a name is checked by architecture
        if list(self.compute_capability) != here[1] or (self.device_name and self.device_name != here[0]):
            raise SerializationNotSupportedError(f"the plan was serialized on {self.device_name} (sm "
                                                 f"{self.compute_capability}); this is {here[0]} (sm "
                                                 f"{here[1]}): rebuild it")


def device_identity(device: int) -> tuple[str, list[int]]:
    from ..._lib import cuda

    info = cuda.device_info(device)
    return info.name, list(info.compute_capability)
