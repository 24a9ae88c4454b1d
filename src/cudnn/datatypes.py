"""``cudnn.datatypes``: framework dtype <-> cudnn.data_type helpers, as the official module has them.

The official module's functions, with its names and its answers (``None`` where there is no
mapping, torch.bool -> BOOLEAN), over cudnn-py's one dtype table (`interop.framework_dtypes`). torch and
CUTLASS are imported only when asked about; ``torch_available`` / ``cutlass_available`` stay
None until then, as in the official module.
"""

from __future__ import annotations

import sys
from typing import Any

from ._lib.enums import data_type as cudnn_data_type
from .interop import framework_dtypes as _dtypes

torch_available: bool | None = None
cutlass_available: bool | None = None
_torch_to_cudnn_data_type_dict: dict[Any, cudnn_data_type] | None = None
_torch_to_cutlass_data_type_dict: dict[Any, Any] | None = None

# torch dtype names the official module maps (it leaves out what torch has and cuDNN calls
# otherwise); bool is the official BOOLEAN here, whatever a tensor_like() of a bool tensor says.
_TORCH_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8",
                "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2")
_CUTLASS_NAMES = {"float16": "Float16", "bfloat16": "BFloat16", "float32": "Float32", "float64": "Float64",
                  "int8": "Int8", "int32": "Int32", "int64": "Int64", "uint8": "Uint8", "bool": "Boolean",
                  "float8_e4m3fn": "Float8E4M3FN", "float8_e5m2": "Float8E5M2", "float8_e8m0fnu": "Float8E8M0FNU",
                  "float4_e2m1fn_x2": "Float4E2M1FN"}


def is_windows() -> bool:
    """Whether this process runs on Windows (as the official ``cudnn.is_windows``)."""
    return sys.platform.startswith("win")


def is_torch_available() -> bool:
    """Whether torch imports; builds the torch -> cuDNN table the first time."""
    global torch_available, _torch_to_cudnn_data_type_dict
    if torch_available is None:
        try:
            import torch
        except ImportError:
            torch_available, _torch_to_cudnn_data_type_dict = False, {}
        else:
            table: dict[Any, cudnn_data_type] = {}
            for name in _TORCH_NAMES:
                dtype = getattr(torch, name, None)
                if dtype is None:
                    continue
                if name == "float4_e2m1fn_x2":  # two fp4 values a byte: cuDNN's packed FP4_E2M1
                    table[dtype] = cudnn_data_type.FP4_E2M1
                else:
                    table[dtype] = _dtypes.from_name(name)
            table[torch.bool] = cudnn_data_type.BOOLEAN
            torch_available, _torch_to_cudnn_data_type_dict = True, table
    return bool(torch_available)


def is_cutlass_available() -> bool:
    """Whether torch and the CUTLASS DSL (``cutlass``) import; builds the torch -> CUTLASS table."""
    global cutlass_available, _torch_to_cutlass_data_type_dict
    if cutlass_available is None:
        try:
            import cutlass
            import torch
        except ImportError:
            cutlass_available, _torch_to_cutlass_data_type_dict = False, {}
        else:
            table = {}
            for name, cutlass_name in _CUTLASS_NAMES.items():
                dtype, numeric = getattr(torch, name, None), getattr(cutlass, cutlass_name, None)
                if dtype is not None and numeric is not None:
                    table[dtype] = numeric
            cutlass_available, _torch_to_cutlass_data_type_dict = True, table
    return bool(cutlass_available)


def _torch_to_cudnn_data_type(torch_data_type: Any) -> cudnn_data_type | None:
    """The cudnn.data_type of a torch dtype, or None (also without torch)."""
    if is_torch_available():
        assert _torch_to_cudnn_data_type_dict is not None
        try:
            return _torch_to_cudnn_data_type_dict.get(torch_data_type)
        except TypeError:  # unhashable
            return None
    return None


def _cudnn_to_torch_data_type(data_type: Any) -> Any:
    """The torch dtype of a cudnn.data_type, or None."""
    if is_torch_available():
        assert _torch_to_cudnn_data_type_dict is not None
        for torch_type, cudnn_type in _torch_to_cudnn_data_type_dict.items():
            if cudnn_type == data_type:
                return torch_type
    return None


def _torch_to_cutlass_data_type(data_type: Any, interpret_uint8_as_fp4x2: bool = False) -> Any:
    if is_cutlass_available() and is_torch_available():
        import torch

        if interpret_uint8_as_fp4x2 and data_type == torch.uint8:
            import cutlass

            return getattr(cutlass, "Float4E2M1FN", None)
        assert _torch_to_cutlass_data_type_dict is not None
        return _torch_to_cutlass_data_type_dict.get(data_type)
    return None


def _convert_to_cutlass_data_type(data_type: Any, interpret_uint8_as_fp4x2: bool = False) -> Any:
    """A CUTLASS numeric type from a torch dtype (or one as is); None without CUTLASS."""
    if not is_cutlass_available():
        return None
    import cutlass

    if isinstance(data_type, type) and issubclass(data_type, cutlass.Numeric):
        return data_type
    if data_type is None:
        raise ValueError("None is not a valid tensor data type.")
    out = _torch_to_cutlass_data_type(data_type, interpret_uint8_as_fp4x2=interpret_uint8_as_fp4x2)
    if out is None:
        raise ValueError(f"Unsupported tensor data type: {data_type!r}")
    return out


def _library_type(input_type: Any) -> cudnn_data_type:
    """A cudnn.data_type from itself or a torch dtype; other frameworks' dtypes (numpy, jax,
    names such as "float16") are accepted too, through cudnn-py's dtype table."""
    if isinstance(input_type, cudnn_data_type):
        return input_type
    out = _torch_to_cudnn_data_type(input_type)
    if out is not None:
        return out
    try:
        return _dtypes.data_type_of(input_type)
    except (TypeError, ValueError):
        pass
    raise TypeError(f"No available conversion from type {input_type!r} to a cudnn.data_type.")


def _is_torch_tensor(input_tensor: Any) -> bool:
    """Whether it is a torch.Tensor (torch is not imported to find out)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(input_tensor, torch.Tensor)


def load_cudnn() -> None:
    """Open libcudnn now (the official helper loads the Windows DLL). cudnn-py loads it on first
    use anyway; calling this surfaces a missing library early, with every place searched."""
    from ._lib import loader

    loader.lib()
