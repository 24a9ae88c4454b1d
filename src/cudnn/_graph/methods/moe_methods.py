"""The mixture-of-experts op methods of ``pygraph``: ``moe_grouped_matmul`` (cuDNN >= 9.15)
and ``moe_grouped_matmul_bwd`` (>= 9.22), with the documented signatures, and the rebuilders
that bring them back from a printed graph's JSON."""

from __future__ import annotations

from typing import Any

from ..._lib.enums import data_type
from ..families.moe_nodes import MoeGroupedMatmul, MoeGroupedMatmulBackward
from ..model.api_enums import moe_grouped_matmul_mode
from ..model.graph_errors import GraphNotImplementedError, SerializationError
from ..model.tensor import Tensor
from ..text.graph_from_json import Build, register
from .graph_ops import GraphOps
from .method_table import op


def _at(graph: GraphOps, op_name: str, name: Any) -> str:
    return f"{op_name} {graph.node_name(name)!r}"


@op
def moe_grouped_matmul(self: GraphOps, token: Any, weight: Any, first_token_offset: Any, token_index: Any = None,
                       token_ks: Any = None, mode: Any = moe_grouped_matmul_mode.NONE,
                       compute_data_type: Any = data_type.FLOAT, top_k: int = 0, name: str = "", *,
                       top_k_scores: Any = None) -> Tensor:
    """Grouped matmul of token rows [1, M, K] by their expert's weight [E, K, N]; returns the
    output [1, M_out, N]. ``first_token_offset`` [E, 1, 1] INT32: the first row of each expert.
    GATHER reads rows through ``token_index``; SCATTER writes them through ``token_index`` and
    ``token_ks`` (with ``top_k`` experts per token). ``top_k_scores`` (1.32) is not supported."""
    at = _at(self, "moe_grouped_matmul", name)
    if top_k_scores is not None:
        raise GraphNotImplementedError(f"{at}: top_k_scores (1.32's routing scores) has no cuDNN backend "
                                       "attribute cudnn-py can pass; multiply the output by the scores instead")
    index = None if token_index is None else self.input_tensor(token_index, at, "token_index")
    ks = None if token_ks is None else self.input_tensor(token_ks, at, "token_ks")
    node = MoeGroupedMatmul(self.node_name(name), self.input_tensor(token, at, "token"),
                            self.input_tensor(weight, at, "weight"),
                            self.input_tensor(first_token_offset, at, "first_token_offset"), index, ks, mode,
                            compute_data_type, top_k)
    return self.add_node(node, ["output"])[0]


@op
def moe_grouped_matmul_bwd(self: GraphOps, doutput: Any, token: Any, first_token_offset: Any,
                           compute_data_type: Any = data_type.FLOAT, name: str = "") -> Tensor:
    """The weight gradient of ``moe_grouped_matmul`` (NONE mode): dweight [E, K, N] from doutput
    [1, M, N] and token [1, M, K]; needs cuDNN >= 9.22 (refused when the graph is built on an
    older one)."""
    at = _at(self, "moe_grouped_matmul_bwd", name)
    node = MoeGroupedMatmulBackward(self.node_name(name), self.input_tensor(doutput, at, "doutput"),
                                    self.input_tensor(token, at, "token"),
                                    self.input_tensor(first_token_offset, at, "first_token_offset"),
                                    compute_data_type)
    return self.add_node(node, ["dweight"])[0]


# -- graph JSON ----------------------------------------------------------------------------------

def _need(ins: dict[str, Tensor], port: str) -> Tensor:
    t = ins.get(port)
    if t is None:
        raise SerializationError(f"input {port} is missing")
    return t


@register(MoeGroupedMatmul.tag)
def _moe(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    mode = node.get("mode", "NONE")
    if mode not in moe_grouped_matmul_mode.__members__:
        raise SerializationError(f"'mode' must be one of {list(moe_grouped_matmul_mode.__members__)}, got {mode!r}")
    top_k = node.get("top_k", 0)
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise SerializationError(f"'top_k' must be an int, got {top_k!r}")
    b.graph.moe_grouped_matmul(_need(ins, "token"), _need(ins, "weight"), _need(ins, "first_token_offset"),
                               ins.get("token_index"), ins.get("token_ks"), moe_grouped_matmul_mode[mode],
                               b.dtype(node.get("compute_data_type"), "compute_data_type"), top_k,
                               name=node["name"])


@register(MoeGroupedMatmulBackward.tag)
def _moe_bwd(b: Build, node: dict[str, Any]) -> None:
    ins = b.inputs(node)
    b.graph.moe_grouped_matmul_bwd(_need(ins, "doutput"), _need(ins, "token"), _need(ins, "first_token_offset"),
                                   b.dtype(node.get("compute_data_type"), "compute_data_type"), name=node["name"])
