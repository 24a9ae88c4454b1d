"""What the attention nodes share: their options, the shape rules of Q/K/V and the masks,
and the support checks that can be made before cuDNN sees the graph.

Shapes follow the official frontend: Q [b, h_q, s_q, d_qk], K [b, h_k, s_kv, d_qk],
V [b, h_v, s_kv, d_v] (a paged K/V is a container [num_blocks, h, block, d]), any strides with
stride[3] == 1; h_q must be a multiple of h_k and h_v (GQA/MQA). Every refusal names the node
and the argument, says what is supported and what was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._lib.enums import data_type
from ..._lib.status import version_string
from ..model.graph_errors import GraphError, GraphNotSupportedError
from ..model.node import Context, Node, resolve_input, row_major
from ..model.sdpa_enums import attention_implementation, diagonal_alignment
from ..model.tensor import NOT_SET, Tensor

HALF_TYPES = (data_type.HALF, data_type.BFLOAT16)
INDEX_TYPES = (data_type.INT32, data_type.INT64)
NONPOSITIVE_LEFT_SINCE = 91000  # the fp16/bf16 forward takes a left bound <= 0 from cuDNN 9.10 (official's gate)


@dataclass
class SdpaOptions:
    """The non-tensor arguments of sdpa / sdpa_backward after translation (see sdpa_ops)."""

    generate_stats: bool = True
    attn_scale_value: float | None = None
    alibi: bool = False
    padding: bool = False
    alignment: diagonal_alignment = diagonal_alignment.TOP_LEFT
    left_bound: int | None = None
    right_bound: int | None = None
    dropout_p: float | None = None  # Philox dropout probability (None: none or a user mask)
    max_seq_len_kv: int | None = None  # paged_attention_max_seq_len_kv
    max_total_seq_len_q: int | None = None
    max_total_seq_len_kv: int | None = None
    score_mod: Callable[..., Any] | None = None
    score_mod_bprop: Callable[..., Any] | None = None
    implementation: attention_implementation = attention_implementation.AUTO
    unfuse_fma: bool = False
    stats_use_log2: bool = False
    deterministic: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "alibi_mask": self.alibi,
            "attn_scale_value": self.attn_scale_value,
            "diagonal_alignment": self.alignment.name,
            "dropout_probability": self.dropout_p,
            "left_bound": self.left_bound,
            "max_seq_len_kv": self.max_seq_len_kv,
            "max_total_seq_len_q": self.max_total_seq_len_q,
            "max_total_seq_len_kv": self.max_total_seq_len_kv,
            "padding_mask": self.padding,
            "right_bound": self.right_bound,
            "score_mod": self.score_mod is not None,
            "stats_use_log2": self.stats_use_log2,
        }


@dataclass
class Dims:
    """The attention problem's sizes, read from Q, K, V (and page tables)."""

    b: int
    h_q: int
    h_k: int
    h_v: int
    s_q: int
    s_kv: int
    d_qk: int
    d_v: int


def loaded_version() -> int | None:
    """The loaded libcudnn's version, or None where none can be loaded (validation still runs)."""
    try:
        from ..._lib import loader

        return loader.report().version
    except Exception:  # noqa: BLE001 - no library: version gates wait for the build
        return None


class SdpaBase(Node):
    """Shared inference and checks of the forward and backward attention nodes."""

    port_args: ClassVar[dict[str, str]] = {
        "Max": "score_max", "Sum_exp": "score_sum_exp", "RNG_DUMP": "rng_dump", "DSINK_TOKEN": "dSink_token",
        "Bias": "bias", "SINK_TOKEN": "sink_token", "Attn_scale": "attn_scale", "Block_mask": "block_mask",
        "SEQ_LEN_Q": "seq_len_q", "SEQ_LEN_KV": "seq_len_kv", "Page_table_K": "paged_attention_k_table",
        "Page_table_V": "paged_attention_v_table"}
    io_types: tuple[data_type, ...] = HALF_TYPES  # what Q, K and V may be (the FP8 nodes widen it)
    io_hint = " (FP8 attention is sdpa_fp8)"
    backward: ClassVar[bool] = False  # the backward nodes' rules differ in a few places
    bound_args: ClassVar[tuple[str, str]] = ("diagonal_band_left_bound", "diagonal_band_right_bound")  # the op's names
    # the cuDNN version from which a left bound <= 0 is taken: 0 any, None never (the official's checks per node)
    nonpositive_left_since: ClassVar[int | None] = None
    dims: Dims  # the problem sizes, set by infer() (from problem())

    def __init__(self, name: str, inputs: dict[str, Tensor | None], opts: SdpaOptions, compute_data_type: Any) -> None:
        super().__init__(name, compute_data_type)
        self.inputs = {port: t for port, t in inputs.items() if t is not None}
        self.opts = opts

    def has(self, port: str) -> bool:
        return port in self.inputs or port in self.outputs

    @property
    def paged_k(self) -> bool:
        return "Page_table_K" in self.inputs

    @property
    def paged_v(self) -> bool:
        return "Page_table_V" in self.inputs

    # -- shapes -----------------------------------------------------------------------------

    def check_4d(self, port: str, t: Tensor, head_dim_last: bool = True) -> None:
        """4-D; for tensors whose last dim is the head dim (Q, K, V, O, dO...), stride 1 there."""
        dims, strides = t.get_dim(), t.get_stride()
        if len(dims) != 4:
            raise GraphError(f"{self.at(port)}: must be 4-D, got dims {dims}")
        if head_dim_last and strides[3] != 1:
            raise GraphNotSupportedError(f"{self.at(port)}: the last dim (head dim) must have stride 1, got "
                                         f"strides {strides}")

    def check_stats_input(self, p: Dims) -> None:
        """A backward's Stats input: FLOAT [b, h_q, s_q, 1], as the forward wrote it."""
        stats = self.inputs["Stats"]
        if stats.get_dim() != [p.b, p.h_q, p.s_q, 1] or stats.get_data_type() != data_type.FLOAT:
            raise GraphError(f"{self.at('stats')}: must be FLOAT [b, h_q, s_q, 1] = {[p.b, p.h_q, p.s_q, 1]}, got "
                             f"{stats.get_data_type().name} {stats.get_dim()}")

    def problem(self, ctx: Context) -> Dims:
        """Resolve the inputs, check Q/K/V and return the problem sizes."""
        for port, t in self.inputs.items():
            resolve_input(self, port, t, ctx)
        for port in ("Q", "K", "V"):
            self.check_4d(port, self.inputs[port])
        q, k, v = (self.inputs[p].get_dim() for p in ("Q", "K", "V"))
        types = {p: self.inputs[p].get_data_type() for p in ("Q", "K", "V")}
        for port, dt in types.items():
            if dt not in self.io_types:
                raise GraphNotSupportedError(f"{self.at(port)}: data type must be "
                                             f"{' or '.join(t.name for t in self.io_types)}, got "
                                             f"{dt.name}{self.io_hint}")
        if len(set(types.values())) != 1:
            raise GraphError(f"{self.label()}: Q, K and V must share one data type, got "
                             + ", ".join(f"{p} {dt.name}" for p, dt in types.items()))
        b, h_q, s_q, d_qk = q
        h_k, h_v, d_v = k[1], v[1], v[3]
        if k[3] != d_qk:
            raise GraphError(f"{self.at('K')}: head dim {k[3]} must equal Q's d_qk {d_qk} (Q {q}, K {k})")
        for port, dims, paged in (("K", k, self.paged_k), ("V", v, self.paged_v)):
            if not paged and dims[0] != b:
                raise GraphError(f"{self.at(port)}: batch {dims[0]} must equal Q's batch {b} (Q {q}, {port} {dims})")
        for port, h in (("K", h_k), ("V", h_v)):
            if h_q % h:
                raise GraphNotSupportedError(f"{self.at(port)}: Q's head count h_q={h_q} must be a multiple "
                                             f"of {port}'s h={h} (GQA/MQA), got Q {q}, {port} "
                                             f"{k if port == 'K' else v}")
        if not self.paged_k and not self.paged_v and k[2] != v[2]:
            raise GraphError(f"{self.at('V')}: sequence length {v[2]} must equal K's {k[2]} (K {k}, V {v})")
        for port, d in (("Q", d_qk), ("V", d_v)):
            if d % 8:  # larger head dims are the engines' to refuse (see check_support)
                what = "d_qk" if port == "Q" else "d_v"
                raise GraphNotSupportedError(f"{self.at(port)}: head dim {what}={d} is not supported: it "
                                             "must be a multiple of 8")
        return Dims(b, h_q, h_k, h_v, s_q, self.infer_s_kv(k, v), d_qk, d_v)

    def infer_s_kv(self, k: list[int], v: list[int]) -> int:
        """s_kv: the explicit maximum with paged caches, else K's or V's when not paged, else bias/rng_dump, else
        the page table's blocks times the block size (the official order)."""
        if self.opts.max_seq_len_kv is not None and (self.paged_k or self.paged_v):
            return self.opts.max_seq_len_kv
        if not self.paged_k:
            return k[2]
        if not self.paged_v:
            return v[2]
        for port in ("Bias", "RNG_DUMP"):
            t = self.inputs.get(port) or self.outputs.get(port)
            if t is not None and len(t.get_dim()) == 4:
                return t.get_dim()[3]
        return min(self.inputs["Page_table_K"].get_dim()[2] * k[2], self.inputs["Page_table_V"].get_dim()[2] * v[2])

    # -- checks shared by forward and backward --------------------------------------------------

    def check_common(self, p: Dims) -> None:
        o = self.opts
        full = [p.b, p.h_q, p.s_q, p.s_kv]
        if "Attn_scale" in self.inputs and any(d != 1 for d in self.inputs["Attn_scale"].get_dim()):
            raise GraphError(f"{self.at('attn_scale')}: must hold one value (all dims 1), got "
                             f"{self.inputs['Attn_scale'].get_dim()}")
        if "Bias" in self.inputs:
            bias = self.inputs["Bias"]
            self.check_4d("bias", bias, head_dim_last=False)  # [b, h, s_q, s_kv]: any strides
            if bias.get_data_type() == data_type.BOOLEAN:
                raise GraphNotSupportedError(f"{self.at('bias')}: a BOOLEAN bias is not supported; give a float bias")
            if any(d not in (1, f) for d, f in zip(bias.get_dim(), full)):
                raise GraphError(f"{self.at('bias')}: dims {bias.get_dim()} must broadcast to "
                                 f"[b, h_q, s_q, s_kv] = {full} (each dim 1 or equal)")
        seq: list[str] = [port for port in ("SEQ_LEN_Q", "SEQ_LEN_KV") if port in self.inputs]
        if o.padding and len(seq) != 2:
            raise GraphError(f"{self.at('use_padding_mask')}: the padding mask needs both seq_len_q and seq_len_kv")
        if seq and not o.padding and o.score_mod is None:
            raise GraphError(f"{self.at(seq[0].lower())}: sequence lengths are only used with "
                             "use_padding_mask=True (or a score_mod)")
        for port in seq:
            t = self.inputs[port]
            if t.get_dim() != [p.b, 1, 1, 1] or t.get_data_type() not in INDEX_TYPES:
                raise GraphError(f"{self.at(port.lower())}: must be INT32 or INT64 [b, 1, 1, 1] = "
                                 f"[{p.b}, 1, 1, 1], got "
                                 f"{t.get_data_type().name} {t.get_dim()}")
        for port, t in {**self.inputs, **self.outputs}.items():
            ragged = t.get_ragged_offset()
            if ragged is None:
                continue
            if ragged.get_dim() != [p.b + 1, 1, 1, 1] or ragged.get_data_type() not in INDEX_TYPES:
                raise GraphError(f"{self.at(port)}: ragged offset must be INT32 or INT64 [b + 1, 1, 1, 1] = "
                                 f"[{p.b + 1}, 1, 1, 1], got {ragged.get_data_type().name} {ragged.get_dim()}")
            if not self.backward and not o.padding and o.score_mod is None:
                raise GraphNotSupportedError(f"{self.at(port)}: a ragged offset needs use_padding_mask=True "
                                             "with seq_len_q/kv")
        if o.right_bound is not None and o.right_bound < 0:
            raise GraphError(f"{self.at(self.bound_args[1])}: must be >= 0, got {o.right_bound}")
        self.check_left_bound(loaded_version())
        if o.alibi and o.right_bound != 0:
            raise GraphNotSupportedError(f"{self.at('use_alibi_mask')}: ALiBi needs a causal mask (right bound 0), got "
                                         f"right bound {o.right_bound}")
        if o.left_bound is not None and not o.padding and p.s_q > p.s_kv:
            raise GraphNotSupportedError(f"{self.at('sliding_window_length')}: needs s_q <= s_kv without a "
                                         f"padding mask, got s_q={p.s_q}, s_kv={p.s_kv}")
        ragged_unpadded = not o.padding and any(t.get_ragged_offset() is not None for t in (
            *self.inputs.values(), *self.outputs.values()))
        if o.left_bound is not None and ragged_unpadded:
            raise GraphNotSupportedError(f"{self.at('diagonal_band_left_bound')}: a sliding window on ragged "
                                         "tensors needs use_padding_mask=True")
        if o.alignment == diagonal_alignment.BOTTOM_RIGHT and o.right_bound is not None:  # a bottom-right causal mask
            if not o.padding and p.s_q > p.s_kv:
                raise GraphNotSupportedError(f"{self.at('diagonal_alignment')}: a BOTTOM_RIGHT causal mask needs "
                                             f"s_q <= s_kv without a padding mask, got s_q={p.s_q}, s_kv={p.s_kv}")
            for what, on in (("bias", "Bias" in self.inputs), ("use_alibi_mask", o.alibi),
                             ("dropout", o.dropout_p is not None or "Dropout_mask" in self.inputs),
                             ("ragged tensors without use_padding_mask", ragged_unpadded)):
                if on:
                    raise GraphNotSupportedError(f"{self.at('diagonal_alignment')}: a BOTTOM_RIGHT causal mask "
                                                 f"(diagonal_band_right_bound set) cannot be combined with {what}")
        if o.score_mod is not None:
            for what, on in (("use_alibi_mask", o.alibi), ("use_padding_mask", o.padding),
                             ("causal / diagonal band bounds", o.left_bound is not None or o.right_bound is not None)):
                if on:
                    raise GraphNotSupportedError(f"{self.at('score_mod')}: cannot be combined with {what}; "
                                                 "apply it inside the score_mod")
        if o.dropout_p is not None:
            for port in ("Seed", "Offset"):
                t = self.inputs[port]
                if any(d != 1 for d in t.get_dim()) or t.get_data_type() not in INDEX_TYPES:
                    raise GraphError(f"{self.at('dropout')}: {port.lower()} must be an INT64 or INT32 tensor of "
                                     f"all-1 dims, got {t.get_data_type().name} {t.get_dim()}")
        if "Dropout_mask" in self.inputs:
            mask = self.inputs["Dropout_mask"]
            if len(mask.get_dim()) != 4 or any(d not in (1, f) for d, f in zip(mask.get_dim(), full)):
                raise GraphError(f"{self.at('dropout')}: the mask's dims {mask.get_dim()} must broadcast to "
                                 f"[b, h_q, s_q, s_kv] = {full}")
        for port in ("Page_table_K", "Page_table_V"):
            if port in self.inputs:
                self.check_page_table(port, p)
        if (self.paged_k or self.paged_v) and len(seq) != 2:
            raise GraphNotSupportedError(f"{self.at('paged_attention_k_table')}: paged K/V caches need the "
                                         "sequence lengths seq_len_q and seq_len_kv")
        if o.max_seq_len_kv is not None and not (self.paged_k or self.paged_v) and self.op == "sdpa":
            # the FP8 forwards take it and ignore it, as in the official
            raise GraphNotSupportedError(f"{self.at('paged_attention_max_seq_len_kv')}: only meaningful with "
                                         "paged K/V caches")
        if "SINK_TOKEN" in self.inputs:
            sink = self.inputs["SINK_TOKEN"]
            if sink.get_dim() != [1, p.h_q, 1, 1] or sink.get_data_type() != data_type.FLOAT:
                raise GraphError(f"{self.at('sink_token')}: must be FLOAT [1, h_q, 1, 1] = [1, {p.h_q}, 1, 1], "
                                 f"got {sink.get_data_type().name} {sink.get_dim()}")

    def check_left_bound(self, version: int | None) -> None:
        """A left bound <= 0 puts the band's lower edge on or above the diagonal (keep
        row - left < col): the backward nodes refuse it, the fp16/bf16 forward before cuDNN 9.10,
        and the FP8 / MXFP8 forwards leave it to cuDNN, as the official frontend's checks do.
        ``version`` None (no library loaded): the gate waits for the build's version."""
        left, since = self.opts.left_bound, self.nonpositive_left_since
        if left is None or left > 0 or since == 0:
            return
        arg = self.bound_args[0]
        if since is None:
            raise GraphError(f"{self.at(arg)}: must be > 0 (the sliding window length) in attention backward, "
                             f"got {left}")
        if version is not None and version < since:
            raise GraphError(f"{self.at(arg)}: a left bound <= 0 (a band on or above the diagonal) needs cuDNN >= "
                             f"{version_string(since)}, the loaded libcudnn is {version_string(version)}; "
                             f"expected > 0, got {left}")

    def check_page_table(self, port: str, p: Dims) -> None:
        t = self.inputs[port]
        arg = "paged_attention_k_table" if port.endswith("K") else "paged_attention_v_table"
        if t.get_data_type() != data_type.INT32:
            raise GraphError(f"{self.at(arg)}: a page table must be INT32, got {t.get_data_type().name}")
        dims = t.get_dim()
        if len(dims) != 4 or dims[0] != p.b or dims[1] != 1 or dims[3] != 1:
            raise GraphError(f"{self.at(arg)}: a page table must be [b, 1, ceil(s_kv / block_size), 1] with "
                             f"b={p.b}, got {dims}")

    def check_score_mod(self, fn: Callable[..., Any], arg: str, dims: list[int], ctx: Context) -> None:
        """Run ``fn`` on a probe score tensor now, so a bad callback fails in validate()."""
        from .sdpa_masks import apply_score_mod

        probe = Tensor(f"{self.name}::{arg}_probe", dims, None, data_type.FLOAT, is_virtual=True)
        probe.set_stride(row_major(dims))
        apply_score_mod(self, fn, arg, probe, ctx)

    def stats_like(self, port: str, t: Tensor, p: Dims, ctx: Context) -> None:
        """A [b, h_q, s_q, 1] FLOAT statistics tensor (Stats, Max, Sum_exp)."""
        dims = [p.b, p.h_q, p.s_q, 1]
        if not t.get_dim():
            t.set_dim(dims)
        if not t.get_stride():
            t.set_stride([p.h_q * p.s_q, p.s_q, 1, 1])
        if t.get_data_type() == NOT_SET:
            t.set_data_type(data_type.FLOAT)
        self.set_output(port, t, ctx, dims, t.get_stride())

    def attributes(self) -> dict[str, Any]:
        return self.opts.to_json()
