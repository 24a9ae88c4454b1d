"""Names of the official package that cudnn-py does not provide, and what each needs.

The official ``cudnn`` 1.32 also ships kernels outside cuDNN's Graph API: CuTe-DSL kernels (most
for Blackwell only), JAX bridges to them, Triton and cuTile kernels, Python engines and C API
entry points of newer cuDNN releases. cudnn-py serves cuDNN's Graph API only. Reading one of
these names raises `UnavailableAttributeError` (an AttributeError: ``hasattr`` is False) whose
message says what the name needs; ``from cudnn import name`` raises `UnavailableImportError`
(an ImportError) with the same message. Both are `Unavailable`. CPython cannot make one class
both (ImportError and AttributeError have conflicting instance layouts), so the statement
decides: a ``from ... import`` gets the ImportError.
"""

from __future__ import annotations

import opcode
import sys

_SERVES = "cudnn-py serves cuDNN's Graph API only"
_DSL = "nvidia-cutlass-dsl (the official package's CuTe-DSL kernels)"
_SM100_DSL = "a Blackwell (SM100) GPU and nvidia-cutlass-dsl (the official package's CuTe-DSL kernels)"
_JAX_SM100_DSL = "JAX, a Blackwell (SM100) GPU and nvidia-cutlass-dsl (the official package's CuTe-DSL kernels)"
_MOE_EP = ("a Blackwell (SM100) GPU, nvidia-cutlass-dsl and the communication extras of the official package "
           "(nvidia-cudnn-frontend[cutedsl,comm]: its MoE expert-parallel engine)")
_TRITON = "Triton (the official package's Triton kernels)"
_TRITON_DSL = "Triton and nvidia-cutlass-dsl (the official package's Triton and CuTe-DSL kernels)"
_CUTILE = "cuda-tile (cuTile) and Triton (the official package's cuTile kernels)"
_C_API = ("cuDNN C API functions outside the Graph API that the official package binds in its compiled "
          "extension (from newer cuDNN releases); cudnn-py does not bind them")
_FLA = "flash-linear-attention and the official package's linear-attention engines (Blackwell or cuTile)"

# requirement -> names; one row per family of the official package's top-level names
_FAMILIES: dict[str, tuple[str, ...]] = {
    _SM100_DSL: (
        "GemmSwigluSm100", "gemm_swiglu_wrapper_sm100", "GemmSreluSm100", "gemm_srelu_wrapper_sm100",
        "GemmDsreluSm100", "gemm_dsrelu_wrapper_sm100", "GemmAmaxSm100", "gemm_amax_wrapper_sm100",
        "GemmProjRopeMxfp8Bf16InSm100", "GemmProjRopeMxfp8Mxfp8InSm100", "gemm_proj_rope_mxfp8_wrapper_sm100",
        "RmsNormRhtAmaxSm100", "rmsnorm_rht_amax_wrapper_sm100", "Conv3dRmsNormSiluPadSm100",
        "Conv3dRmsNormSiluSm100", "Conv3dBiasResidualPadSm100", "CausalConv3dWithCacheSm100", "Conv3dRawSm100",
        "RmsNormSiluPadSm100", "pack_conv3d_weight_sm100", "pack_causal_conv3d_weight_sm100",
        "conv3d_rmsnorm_silu_pad_wrapper_sm100", "conv3d_rmsnorm_silu_wrapper_sm100",
        "conv3d_bias_residual_pad_wrapper_sm100", "causal_conv3d_with_cache_wrapper_sm100",
        "conv3d_raw_wrapper_sm100", "rmsnorm_silu_pad_wrapper_sm100", "grouped_gemm", "GroupedGemmSm100",
        "grouped_gemm_wrapper_sm100", "GroupedGemmSwigluSm100", "grouped_gemm_swiglu_wrapper_sm100",
        "GroupedGemmDswigluSm100", "grouped_gemm_dswiglu_wrapper_sm100", "GroupedGemmSreluSm100",
        "grouped_gemm_srelu_wrapper_sm100", "GroupedGemmDsreluSm100", "grouped_gemm_dsrelu_wrapper_sm100",
        "GroupedGemmQuantSm100", "grouped_gemm_quant_wrapper_sm100", "GroupedGemmGluSm100",
        "grouped_gemm_glu_wrapper_sm100", "GroupedGemmGluHadamardSm100", "grouped_gemm_glu_hadamard_wrapper_sm100",
        "GroupedGemmGluHadamardQuantSm100", "grouped_gemm_glu_hadamard_quant_wrapper_sm100", "GroupedGemmDgluSm100",
        "grouped_gemm_dglu_wrapper_sm100", "GroupedGemmWgradSm100", "get_grouped_gemm_wgrad_workspace_size_sm100",
        "grouped_gemm_wgrad_wrapper_sm100", "discrete_grouped_gemm", "DiscreteGroupedGemmSwigluSm100",
        "discrete_grouped_gemm_swiglu_wrapper_sm100", "DiscreteGroupedGemmDswigluSm100",
        "discrete_grouped_gemm_dswiglu_wrapper_sm100", "CSA", "CSACompressorForward", "CSACompressorBackward",
        "csa_compressor_forward_wrapper", "csa_compressor_backward_wrapper", "hstu_attention_forward",
        "hstu_attention_backward", "hstu_lmsd_forward", "hstu_lmsd_backward", "gated_attention_block",
        "gated_attention_block_forward", "gated_attention_block_backward", "GatedAttentionBlockFwd",
        "GatedAttentionBlockBwd", "triangle_multiplicative_update", "TriangleMultiplicativeUpdateFwd",
        "CompactGqaBackward", "compact_gqa_backward",
    ),
    _JAX_SM100_DSL: (
        "jax", "gemm_swiglu_jax_sm100", "gemm_srelu_jax_sm100", "gemm_dsrelu_jax_sm100", "gemm_amax_jax_sm100",
        "gemm_proj_rope_mxfp8_jax_sm100", "grouped_gemm_jax_sm100", "grouped_gemm_glu_jax_sm100",
        "grouped_gemm_dglu_jax_sm100", "grouped_gemm_dsrelu_jax_sm100", "grouped_gemm_wgrad_jax_sm100",
        "grouped_gemm_quant_jax_forward", "grouped_gemm_srelu_jax_forward", "grouped_gemm_glu_hadamard_jax_forward",
        "grouped_gemm_glu_hadamard_quant_jax_forward", "discrete_grouped_gemm_swiglu_jax_sm100",
        "discrete_grouped_gemm_dswiglu_jax_sm100",
    ),
    _DSL: (
        "FlexAttentionFwd", "FlexAttentionBwd", "create_mask_plan", "flex_attn_func", "BSA",
        "block_sparse_attention_forward", "block_sparse_attention_fp8_forward", "block_sparse_attention_backward",
        "DSA", "NSA", "triangle_attention", "mask_to_kv_lengths", "prefix_mask_to_kv_lengths",
        "TriangleAttentionFwd",
    ),
    _MOE_EP: (
        "moe_ep", "BlockScaledTensor", "MoeEp", "MoeEpConfig", "MoeEpDataPathConfig", "MoeEpFc1WeightLayout",
        "MoeEpModelConfig", "MoeEpParallelConfig", "MoeEpAutotuneCandidateResult", "MoeEpAutotuneResult",
        "MoeEpBackwardWeightStaging", "MoeEpBackwardWeights", "MoeEpForwardWeightStaging", "MoeEpForwardWeights",
        "MoeEpNativeBackwardWeights", "MoeEpNativeDiscreteBackwardWeights", "MoeEpNativeDiscreteForwardWeights",
        "MoeEpNativeDiscreteWeight", "MoeEpNativeForwardWeights", "MoeEpNativeWeight", "MoeEpNativeWeightLayout",
        "MoeEpNativeWeightStorageMode", "MoeEpTrainingBackwardOutputs", "MoeEpTrainingForwardOutputs",
        "MoeEpTrainingWgradOperands", "MoeEpTuningConfig", "MoeFormat", "MoeTensor", "pack_backward_weights",
        "pack_forward_weights",
    ),
    _TRITON: ("RopeQDQInplace", "rope_qdq_inplace"),
    _TRITON_DSL: (
        "AlignedHCABackward", "aligned_hca_backward_wrapper", "Nvfp4AttentionQatBackward",
        "nvfp4_attention_qat_backward", "EngramGateSavedForward", "EngramGateSavedBackward",
        "engram_gate_saved_forward", "engram_gate_saved_backward", "TailRoPEForward", "tail_rope",
        "VisionRoPEBackward", "vision_rope_backward_wrapper",
    ),
    _CUTILE: ("MhcProjectionBackward", "mhc_projection_backward"),
    _C_API: (
        "causal_conv1d_nwh_forward", "causal_conv1d_nwh_backward", "b2b_causal_conv1d_forward",
        "b2b_causal_conv1d_backward", "fft_causal_conv1d_forward", "fft_causal_conv1d_backward",
        "long_fft_causal_conv1d_get_buffer_sizes", "long_fft_causal_conv1d_forward",
        "long_fft_causal_conv1d_backward", "gnn", "gnn_agg_op", "gnn_agg_simple_forward", "gnn_agg_simple_backward",
        "gnn_activation_op", "gnn_mha_gat_forward", "gnn_mha_gat_backward", "gnn_mha_gat_v2_forward",
        "gnn_mha_gat_v2_backward",
    ),
    _FLA: ("fla",),
}

# the official's Blackwell-only torch ops beside the ones cudnn-py has (cudnn.experimental.ops, cudnn.gemm)
_OPS = {"swiglu_mlp": _SM100_DSL, "situ_mlp": _SM100_DSL, "swiglu_moe": _SM100_DSL,
        "MhcProjectionBackward": _CUTILE, "mhc_projection_backward": _CUTILE}

TOP_LEVEL: dict[str, str] = {name: need for need, names in _FAMILIES.items() for name in names}
TABLES: dict[str, dict[str, str]] = {"cudnn": TOP_LEVEL, "cudnn.experimental.ops": _OPS, "cudnn.gemm": _OPS,
                                     "cudnn.gemm.ops": _OPS}


class Unavailable(Exception):
    """A name of the official package that cudnn-py does not provide; ``name`` and ``needs`` say which and why."""

    name: str | None
    needs: str


class UnavailableAttributeError(AttributeError, Unavailable):
    """Reading an unavailable name (``cudnn.X``, ``getattr``, ``hasattr``)."""


class UnavailableImportError(ImportError, Unavailable):
    """``from cudnn import X`` of an unavailable name."""


_IMPORT_FROM = opcode.opmap.get("IMPORT_FROM", -1)


def _in_import_from() -> bool:
    """Whether the innermost frame outside cudnn's lookup hooks is executing ``from m import name``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("cudnn") \
            and frame.f_code.co_name in ("__getattr__", "missing", "_in_import_from"):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return False
    code, i = frame.f_code.co_code, frame.f_lasti
    return 0 <= i < len(code) and code[i] == _IMPORT_FROM


def message(module: str, name: str) -> str | None:
    """Why ``module.name`` is absent, or None when it is not a name of the official package."""
    needs = TABLES.get(module, {}).get(name)
    if needs is None:
        return None
    return f"{module}.{name} is not provided by cudnn-py: it needs {needs}; {_SERVES}"


def missing(module: str, name: str) -> AttributeError | ImportError:
    """The error for reading ``name`` of ``module`` that is not there: for an official name
    cudnn-py does not provide, an `Unavailable` error saying what it needs (an ImportError
    under ``from module import name``, else an AttributeError); otherwise a plain AttributeError."""
    text = message(module, name)
    if text is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    kind = UnavailableImportError if _in_import_from() else UnavailableAttributeError
    exc = kind(text, name=name)
    exc.needs = TABLES[module][name]
    return exc
