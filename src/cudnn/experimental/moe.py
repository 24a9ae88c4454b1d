"""``cudnn.experimental.ops.moe_grouped_matmul`` (also ``cudnn.experimental.moe_grouped_matmul`` and
``cudnn.gemm.ops.moe_grouped_matmul``): the official torch-facing MoE grouped matmul, with its
signature, and the torch op ``cudnn::moe_grouped_matmul`` with the official schema.

One call builds (once per shapes, strides, dtypes, mode and top_k; cached per device) a graph of
``pygraph.moe_grouped_matmul`` (`declare`) and runs it on torch's current stream. Token rows
[1, M, K] grouped by expert, weight [E, K, N] (any strides, e.g. ``w.transpose(1, 2)`` of
[E, N, K]), first_token_offset [E, 1, 1] INT32; returns [1, M_out, N] in the token's dtype.
Meta tensors give the output's shape only, as the official's fake kernel does.
"""

from __future__ import annotations

import torch

from .._graph.model.api_enums import moe_grouped_matmul_mode
from .._graph.model.tensor import Tensor
from .._graph.pygraph import pygraph
from ..ops import _runtime as rt

OP = "moe_grouped_matmul"
MODES = ("none", "gather", "scatter")
SINCE = 91500


def _rows(token: torch.Tensor, token_index: torch.Tensor | None, mode: str) -> int:
    return int(token_index.shape[1]) if mode == "gather" and token_index is not None else int(token.shape[1])


def _check(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
           token_index: torch.Tensor | None, token_ks: torch.Tensor | None, mode: str,
           top_k: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Refuse bad arguments, naming them; returns the token_index and token_ks the mode reads."""
    err = rt.OpError
    mode = rt.choice(OP, "mode", mode, MODES)
    rt.check_tensor(OP, "token", token, (*rt.HALVES, torch.float32), 3)
    rt.check_cuda(OP, "token", token)
    rt.check_tensor(OP, "weight", weight, (token.dtype,), 3, token.device)
    rt.check_tensor(OP, "first_token_offset", first_token_offset, (torch.int32,), 3, token.device)
    for name, t in (("token_index", token_index), ("token_ks", token_ks)):
        if t is not None:
            rt.check_tensor(OP, name, t, (torch.int32,), 3, token.device)
    if mode != "none" and token_index is None:
        raise err(f"cudnn.ops.{OP}: token_index: mode {mode!r} needs it, got None")
    if mode == "scatter" and token_ks is None:
        raise err(f"cudnn.ops.{OP}: token_ks: mode 'scatter' needs it, got None")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise err(f"cudnn.ops.{OP}: top_k: expected an int >= 1, got {top_k!r}")
    return (token_index if mode != "none" else None), (token_ks if mode == "scatter" else None)


def _run(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
         token_index: torch.Tensor | None, token_ks: torch.Tensor | None, mode: str, top_k: int) -> torch.Tensor:
    index, ks = _check(token, weight, first_token_offset, token_index, token_ks, mode, top_k)
    output = torch.empty(1, _rows(token, index, mode), weight.shape[2], dtype=token.dtype, device=token.device)
    if token.device.type == "meta":
        return output
    rt.needs_version(f"cudnn.experimental.ops.{OP}", SINCE)
    device = rt.device_index(token)
    key = (OP, mode, top_k, rt.signature(token, weight, first_token_offset, index, ks))
    built = rt.CACHE.get(device, key, lambda g: declare(g, mode, top_k, token, weight, first_token_offset, index, ks))
    pack = {"token": token, "weight": weight, "first_token_offset": first_token_offset, "output": output}
    if index is not None:
        pack["token_index"] = index
    if ks is not None:
        pack["token_ks"] = ks
    rt.execute(built, device, pack)
    return output


@torch.library.custom_op("cudnn::moe_grouped_matmul", mutates_args=(),
                         schema="(Tensor token, Tensor weight, Tensor first_token_offset, Tensor? token_index=None, "
                                "Tensor? token_ks=None, str mode=\"none\", int top_k=1) -> Tensor")
def _op(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
        token_index: torch.Tensor | None = None, token_ks: torch.Tensor | None = None, mode: str = "none",
        top_k: int = 1) -> torch.Tensor:
    return _run(token, weight, first_token_offset, token_index, token_ks, mode, top_k)


@_op.register_fake
def _(token, weight, first_token_offset, token_index=None, token_ks=None, mode="none", top_k=1):  # type: ignore[no-untyped-def]
    index, _ks = _check(token, weight, first_token_offset, token_index, token_ks, mode, top_k)
    return token.new_empty(1, _rows(token, index, mode), weight.shape[2])


def moe_grouped_matmul(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
                       token_index: torch.Tensor | None = None, token_ks: torch.Tensor | None = None,
                       mode: str = "none", top_k: int = 1) -> torch.Tensor:
    """Per expert e, its token rows (from ``first_token_offset[e]`` to the next expert's) times
    ``weight[e]``. ``mode``: "none" (rows already grouped), "gather" (rows read through
    ``token_index``), "scatter" (written through ``token_index`` and ``token_ks``, ``top_k``
    experts per token). Needs cuDNN >= 9.15. Eager CUDA calls run directly; otherwise (meta
    tensors, torch.compile) the torch op ``cudnn::moe_grouped_matmul`` runs."""
    if rt.eager(token, weight, first_token_offset, token_index, token_ks):
        return _run(token, weight, first_token_offset, token_index, token_ks, mode, top_k)
    return torch.ops.cudnn.moe_grouped_matmul(token, weight, first_token_offset, token_index, token_ks, mode, top_k)


def declare(g: pygraph, mode: str, top_k: int, token: torch.Tensor, weight: torch.Tensor,
            first_token_offset: torch.Tensor, token_index: torch.Tensor | None,
            token_ks: torch.Tensor | None) -> dict[str, Tensor]:
    """Declare the MoE grouped matmul of these tensors on ``g``: its graph tensors by role, the
    output marked, in the token's dtype."""
    ports = {"token": rt.tensor_of(g, "token", token), "weight": rt.tensor_of(g, "weight", weight),
             "first_token_offset": rt.tensor_of(g, "first_token_offset", first_token_offset)}
    if token_index is not None:
        ports["token_index"] = rt.tensor_of(g, "token_index", token_index)
    if token_ks is not None:
        ports["token_ks"] = rt.tensor_of(g, "token_ks", token_ks)
    out = g.moe_grouped_matmul(ports["token"], ports["weight"], ports["first_token_offset"],
                               ports.get("token_index"), ports.get("token_ks"),
                               moe_grouped_matmul_mode[mode.upper()], top_k=top_k if mode == "scatter" else 0,
                               name="moe")
    out.set_output(True).set_data_type(rt.CUDNN_DTYPE[token.dtype])
    ports["output"] = out
    return ports
