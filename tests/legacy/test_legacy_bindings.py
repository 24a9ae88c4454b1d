"""cudnn.legacy without a GPU: every header function bound with its prototype, out-parameter
detection, the seed's enum dictionaries, status translation and refusal of bad input.

libcudnn loads on a machine without a GPU and descriptors work there (only handle creation
fails), so descriptor calls below are real cuDNN calls.
"""

from __future__ import annotations

import ctypes
import inspect
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.generated_tables import headers_of_the_tables, tool

import cudnn
from cudnn import legacy as L
from cudnn._lib import capi, legacy_ctypes, legacy_enums, structs
from cudnn._lib import cuda as _cuda
from cudnn._lib.api_legacy import FUNCTIONS as LEGACY_TABLE
from cudnn.legacy import Kind

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ("cudnn_ops_v9.h", "cudnn_cnn_v9.h", "cudnn_adv_v9.h")


def _parsed_header_functions() -> list:  # type: ignore[type-arg]
    include = headers_of_the_tables()
    cheader = tool("cheader")
    out = []
    for header in HEADERS:
        out += cheader.parse_functions((include / header).read_text(), header)
    return out


# -- every function, with the right signature ----------------------------------------------------

_NUMBERS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
    "double": ctypes.c_double, "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32,
    "unsigned long long": ctypes.c_ulonglong, "int64_t": ctypes.c_int64,
    "libraryPropertyType": ctypes.c_int,  # a CUDA enum
}


def _expected_ctype(ctype: str) -> object:
    """The ctypes type a C parameter type must bind to (written independently of capi.ctype_of)."""
    base = ctype.replace("const ", "").replace("*", "").strip()
    stars = ctype.count("*")
    enum_like = base in L.ENUM_TYPES
    if stars == 0:
        if base in _NUMBERS:
            return _NUMBERS[base]
        if enum_like:
            return ctypes.c_int
        assert base in structs.OPAQUE_TYPES or base in ("cudaStream_t", "cudnnCallback_t"), base
        return ctypes.c_void_p
    if stars == 2 or base == "void":
        return ctypes.c_void_p
    if base == "char":
        return ctypes.c_char_p
    if base in structs.STRUCTS:
        return ctypes.POINTER(structs.STRUCTS[base])
    if base in _NUMBERS:
        return ctypes.POINTER(_NUMBERS[base])
    if enum_like:
        return ctypes.POINTER(ctypes.c_int)
    return ctypes.POINTER(ctypes.c_void_p)


def test_every_header_function_is_in_the_table_and_the_module() -> None:
    parsed = _parsed_header_functions()
    assert len(parsed) == len(LEGACY_TABLE) >= 190
    for f in parsed:
        restype, params, _, deprecated = LEGACY_TABLE[f.name]
        assert (restype, params, deprecated) == (f.restype, tuple((p.ctype, p.name) for p in f.params), f.deprecated)
        fn = getattr(L, f.name)
        assert fn.__name__ == f.name and f.name in L.FUNCTIONS
        assert f.name in (fn.__doc__ or "")
    for name in ("cudnnCreate", "cudnnDestroy", "cudnnSetStream", "cudnnGetStream", "cudnnGetVersion",
                 "cudnnGetCudartVersion", "cudnnGetErrorString", "cudnnGetLastErrorString", "cudnnSetCallback"):
        assert name in L.HANDLE_FUNCTIONS and callable(getattr(L, name))
    assert not any(n.startswith("cudnnBackend") for n in L.FUNCTIONS)


def test_every_function_binds_with_argtypes_matching_the_prototype() -> None:
    for name, sig in L.SIGNATURES.items():
        api = capi.graph if name in L.HANDLE_FUNCTIONS else capi.legacy
        cfunc = getattr(api, name)  # binds: the symbol exists in the loaded libcudnn
        assert len(cfunc.argtypes) == len(sig.params), name
        for (ctype_text, pname), argtype in zip(((p.ctype, p.name) for p in sig.params), cfunc.argtypes):
            assert argtype is _expected_ctype(ctype_text), f"{name}({pname}): {ctype_text} bound as {argtype}"
        expected_ret = {"cudnnStatus_t": ctypes.c_int, "size_t": ctypes.c_size_t, "void": None,
                        "const char *": ctypes.c_char_p}[sig.restype]
        assert cfunc.restype is expected_ret, name


def test_python_signatures_are_the_c_inputs() -> None:
    for name, sig in L.SIGNATURES.items():
        names = list(inspect.signature(getattr(L, name)).parameters)
        assert names == [p.name for p in sig.params if p.kind not in (Kind.OUT, Kind.OUT_ARRAY, Kind.OUT_STRING)]


# -- out-parameters, scalars, pointers: the classification -----------------------------------------

@pytest.mark.parametrize("expected", [
    "cudnnCreate() -> handle",
    "cudnnCreateTensorDescriptor() -> tensorDesc",
    "cudnnGetTensor4dDescriptor(tensorDesc) -> (dataType, n, c, h, w, nStride, cStride, hStride, wStride)",
    "cudnnGetTensorNdDescriptor(tensorDesc, nbDimsRequested) -> (dataType, nbDims, dimA, strideA)",
    "cudnnGetConvolution2dForwardOutputDim(convDesc, inputTensorDesc, filterDesc) -> (n, c, h, w)",
    ("cudnnGetConvolutionForwardAlgorithm_v7(handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount)"
     " -> perfResults"),
    "cudnnFindConvolutionForwardAlgorithm(handle, xDesc, wDesc, convDesc, yDesc, requestedAlgoCount) -> perfResults",
    "cudnnGetConvolutionForwardWorkspaceSize(handle, xDesc, wDesc, convDesc, yDesc, algo) -> sizeInBytes",
    ("cudnnConvolutionForward(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes,"
     " beta, yDesc, y) -> None"),
    "cudnnGetDropoutDescriptor(dropoutDesc, handle) -> (dropout, states, seed)",
    "cudnnGetRNNTempSpaceSizes(handle, rnnDesc, fwdMode, xDesc) -> (workSpaceSize, reserveSpaceSize)",
    ("cudnnGetRNNWeightParams(handle, rnnDesc, pseudoLayer, weightSpaceSize, weightSpace, linLayerID, mDesc, bDesc)"
     " -> (mAddr, bAddr)"),
    ("cudnnGetSeqDataDescriptor(seqDataDesc, nbDimsRequested, seqLengthSizeRequested, paddingFill)"
     " -> (dataType, nbDims, dimA, axes, seqLengthArraySize, seqLengthArray)"),
    "cudnnGetLastErrorString(max_size) -> message",
    "cudnnGetStream(handle) -> streamId",
    "cudnnGetVersion() -> size_t",
    "cudnnGetErrorString(status) -> const char *",
])
def test_out_parameters_are_returned(expected: str) -> None:
    assert str(L.SIGNATURES[expected.split("(")[0]]) == expected


def test_classification_rules_hold_for_every_parameter() -> None:
    scales = 0
    for name, sig in L.SIGNATURES.items():
        for p in sig.params:
            star = p.ctype.count("*")
            if p.kind is Kind.SCALE:
                scales += 1
                assert p.ctype == "const void *" and p.name.startswith(("alpha", "beta"))
                assert p.dtype_from is not None, name  # every scaled call has a tensor to decide by
            if star == 1 and not p.ctype.startswith("const") and p.base not in ("void", "char", "cudnnRuntimeTag_t"):
                assert p.kind in (Kind.OUT, Kind.OUT_ARRAY), f"{name}.{p.name}"
            if p.kind is Kind.OUT_ARRAY:
                assert p.length in {q.name for q in sig.inputs}, f"{name}.{p.name}"
    assert scales >= 60
    conv = {p.name: p for p in L.SIGNATURES["cudnnConvolutionForward"].params}
    assert conv["alpha"].kind is conv["beta"].kind is Kind.SCALE and conv["alpha"].dtype_from == "xDesc"
    assert conv["x"].kind is conv["y"].kind is conv["workSpace"].kind is Kind.POINTER
    bwd = {p.name: p for p in L.SIGNATURES["cudnnConvolutionBackwardData"].params}
    assert bwd["alpha"].dtype_from == "dyDesc"  # the first tensor descriptor (wDesc is a filter)
    rnn = {p.name: p for p in L.SIGNATURES["cudnnRNNForward"].params}
    assert rnn["devSeqLengths"].kind is Kind.IN_ARRAY and rnn["devSeqLengths"].device
    assert rnn["cDesc"].optional and not rnn["hDesc"].optional
    find = {p.name: p for p in L.SIGNATURES["cudnnFindConvolutionForwardAlgorithm"].params}
    assert find["perfResults"].length == "requestedAlgoCount" and find["perfResults"].filled == "returnedAlgoCount"


# -- enums, constants and structs ---------------------------------------------------------------

def test_seed_enum_dictionaries() -> None:
    assert L.cudnnTensorFormat["CUDNN_TENSOR_NCHW"] == 0
    assert L.cudnnTensorFormat["CUDNN_TENSOR_NHWC"] == 1
    assert L.cudnnDataType["CUDNN_DATA_FLOAT"] == 0 and L.cudnnDataType["CUDNN_DATA_DOUBLE"] == 1
    assert L.cudnnConvolutionMode["CUDNN_CONVOLUTION"] == 0 and L.cudnnConvolutionMode["CUDNN_CROSS_CORRELATION"] == 1
    assert L.cudnnConvolutionFwdAlgo["CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM"] == 0
    assert L.cudnnSoftmaxAlgorithm["CUDNN_SOFTMAX_LOG"] == 2
    assert L.cudnnPoolingMode["CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING"] == 2
    assert L.cudnnActivationMode["CUDNN_ACTIVATION_RELU"] == 1
    assert L.cudnnBatchNormMode["CUDNN_BATCHNORM_SPATIAL"] == 1
    assert L.cudnnRNNMode["CUDNN_LSTM"] == 2 and L.cudnnCTCLossAlgo["CUDNN_CTC_LOSS_ALGO_DETERMINISTIC"] == 0
    for name, table in L.ENUM_DICTS.items():
        assert all(isinstance(v, int) for v in table.values()), name
        assert getattr(L, name) is table and getattr(L, name + "_t") is L.ENUM_TYPES[name + "_t"]
    assert L.cudnnTensorFormat_t.CUDNN_TENSOR_NCHW is L.cudnnTensorFormat["CUDNN_TENSOR_NCHW"]
    assert L.CUDNN_SEV_ERROR_EN == 2 and L.CUDNN_RNN_PADDED_IO_ENABLED == 1 and L.CUDNN_LRN_MIN_K == 1e-5


def test_removed_seed_names_say_what_replaces_them() -> None:
    with pytest.raises(AttributeError, match="cudnnGetConvolutionForwardAlgorithm_v7"):
        L.cudnnConvolutionFwdPreference  # noqa: B018
    with pytest.raises(AttributeError, match="removed in cuDNN 8"):
        L.cudnnGetConvolutionForwardAlgorithm  # noqa: B018
    with pytest.raises(AttributeError):
        L.cudnnNotAFunction  # noqa: B018


def test_legacy_enums_have_the_header_values() -> None:
    include = headers_of_the_tables()
    cheader = tool("cheader")
    known: dict[str, int] = {}
    cheader.parse_enums((include / "cudnn_graph_v9.h").read_text(), "", known)
    parsed = [e for h in HEADERS for e in cheader.parse_enums((include / h).read_text(), h, known)]
    assert len(parsed) >= 30
    for enum in parsed:
        cls = getattr(legacy_enums, enum.name)
        assert {m.name: m.value for m in enum.members} == {k: int(v) for k, v in cls.__members__.items()}


def test_structs_have_the_c_layout() -> None:
    perf = structs.cudnnConvolutionFwdAlgoPerf_t
    assert ctypes.sizeof(perf) == 48 and perf.memory.offset == 16 and perf.mathType.offset == 28
    assert ctypes.sizeof(structs.cudnnDebug_t) == 120 and structs.cudnnDebug_t.handle.offset == 24
    text = repr(perf(algo=1, status=0, time=0.5, memory=64, determinism=1, mathType=0))
    assert "algo=CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM" in text and "memory=64" in text
    assert L.cudnnConvolutionBwdFilterAlgoPerf_t is structs.cudnnConvolutionBwdFilterAlgoPerf_t


# -- real calls: descriptors round-trip ------------------------------------------------------------

def test_tensor_filter_convolution_descriptors_round_trip() -> None:
    x = L.cudnnCreateTensorDescriptor()
    L.cudnnSetTensor4dDescriptor(x, L.cudnnTensorFormat["CUDNN_TENSOR_NCHW"], L.cudnnDataType["CUDNN_DATA_FLOAT"],
                                 2, 8, 16, 16)
    assert L.cudnnGetTensor4dDescriptor(x) == (L.cudnnDataType_t.CUDNN_DATA_FLOAT, 2, 8, 16, 16, 2048, 256, 16, 1)
    assert L.cudnnGetTensorSizeInBytes(x) == 2 * 8 * 16 * 16 * 4
    w = L.cudnnCreateFilterDescriptor()
    L.cudnnSetFilter4dDescriptor(w, "CUDNN_DATA_FLOAT", "CUDNN_TENSOR_NCHW", 4, 8, 3, 3)  # names work too
    assert L.cudnnGetFilter4dDescriptor(w)[2:] == (4, 8, 3, 3)
    conv = L.cudnnCreateConvolutionDescriptor()
    L.cudnnSetConvolution2dDescriptor(conv, 1, 1, 2, 2, 1, 1, L.cudnnConvolutionMode["CUDNN_CROSS_CORRELATION"],
                                      L.cudnnDataType["CUDNN_DATA_FLOAT"])
    assert L.cudnnGetConvolution2dForwardOutputDim(conv, x, w) == (2, 4, 8, 8)
    assert L.cudnnGetConvolutionNdForwardOutputDim(conv, x, w, 4) == [2, 4, 8, 8]
    length, pads, strides, dilations, mode, _ = L.cudnnGetConvolutionNdDescriptor(conv, 4)
    assert (length, pads, strides, dilations) == (2, [1, 1], [2, 2], [1, 1])  # lists cut to arrayLength
    assert mode is L.cudnnConvolutionMode_t.CUDNN_CROSS_CORRELATION
    L.cudnnSetConvolutionGroupCount(conv, 2)
    assert L.cudnnGetConvolutionGroupCount(conv) == 2
    nd = L.cudnnCreateTensorDescriptor()
    L.cudnnSetTensorNdDescriptor(nd, "CUDNN_DATA_DOUBLE", 3, [4, 5, 6], (30, 6, 1))
    assert L.cudnnGetTensorNdDescriptor(nd, 8) == (L.cudnnDataType_t.CUDNN_DATA_DOUBLE, 3, [4, 5, 6], [30, 6, 1])
    L.cudnnSetTensorNdDescriptor(nd, "CUDNN_DATA_FLOAT", 3, np.array([1, 2, 3]), np.array([6, 3, 1]))
    assert L.cudnnGetTensorNdDescriptor(nd, 3)[2] == [1, 2, 3]
    for destroy, desc in ((L.cudnnDestroyTensorDescriptor, x), (L.cudnnDestroyTensorDescriptor, nd),
                          (L.cudnnDestroyFilterDescriptor, w), (L.cudnnDestroyConvolutionDescriptor, conv)):
        destroy(desc)
        assert desc.destroyed


def test_pooling_activation_lrn_rnn_descriptors() -> None:
    x = L.cudnnCreateTensorDescriptor()
    L.cudnnSetTensor4dDescriptor(x, "CUDNN_TENSOR_NCHW", "CUDNN_DATA_FLOAT", 2, 3, 16, 16)
    pool = L.cudnnCreatePoolingDescriptor()
    L.cudnnSetPooling2dDescriptor(pool, "CUDNN_POOLING_MAX", "CUDNN_NOT_PROPAGATE_NAN", 3, 3, 1, 1, 2, 2)
    assert L.cudnnGetPooling2dDescriptor(pool)[2:] == (3, 3, 1, 1, 2, 2)
    assert L.cudnnGetPooling2dForwardOutputDim(pool, x) == (2, 3, 8, 8)
    act = L.cudnnCreateActivationDescriptor()
    L.cudnnSetActivationDescriptor(act, "CUDNN_ACTIVATION_CLIPPED_RELU", "CUDNN_NOT_PROPAGATE_NAN", 6.0)
    assert L.cudnnGetActivationDescriptor(act) == (L.cudnnActivationMode_t.CUDNN_ACTIVATION_CLIPPED_RELU,
                                                   L.cudnnNanPropagation_t.CUDNN_NOT_PROPAGATE_NAN, 6.0)
    lrn = L.cudnnCreateLRNDescriptor()
    L.cudnnSetLRNDescriptor(lrn, 5, 1e-4, 0.75, 2.0)
    assert L.cudnnGetLRNDescriptor(lrn) == (5, 1e-4, 0.75, 2.0)
    dropout = L.cudnnCreateDropoutDescriptor()
    rnn = L.cudnnCreateRNNDescriptor()
    L.cudnnSetRNNDescriptor_v8(rnn, "CUDNN_RNN_ALGO_STANDARD", "CUDNN_LSTM", "CUDNN_RNN_DOUBLE_BIAS",
                               "CUDNN_UNIDIRECTIONAL", "CUDNN_LINEAR_INPUT", "CUDNN_DATA_FLOAT", "CUDNN_DATA_FLOAT",
                               "CUDNN_DEFAULT_MATH", 16, 32, 32, 2, dropout, 0)
    got = L.cudnnGetRNNDescriptor_v8(rnn)
    assert got[1] is L.cudnnRNNMode_t.CUDNN_LSTM and got[8:12] == (16, 32, 32, 2)
    assert got[12] is dropout  # the descriptor handed back is the caller's object
    L.cudnnSetRNNDescriptor_v8(rnn, 0, 2, 2, 0, 0, 0, 0, 0, 16, 32, 32, 1, None, 0)  # dropoutDesc may be NULL
    assert L.cudnnGetRNNDescriptor_v8(rnn)[12] is None
    data = L.cudnnCreateRNNDataDescriptor()
    fill = ctypes.c_float(0.5)
    L.cudnnSetRNNDataDescriptor(data, "CUDNN_DATA_FLOAT", "CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED", 5, 3, 8,
                                [5, 4, 2], fill)
    out_fill = ctypes.c_float()
    assert L.cudnnGetRNNDataDescriptor(data, 3, out_fill)[2:] == (5, 3, 8, [5, 4, 2]) and out_fill.value == 0.5
    ctc = L.cudnnCreateCTCLossDescriptor()
    L.cudnnSetCTCLossDescriptor_v9(ctc, "CUDNN_DATA_FLOAT", "CUDNN_LOSS_NORMALIZATION_SOFTMAX",
                                   "CUDNN_CTC_ZERO_OOB_GRADIENTS", 10)
    assert L.cudnnGetCTCLossDescriptor_v9(ctc)[3] == 10
    for fn, d in ((L.cudnnDestroyTensorDescriptor, x), (L.cudnnDestroyPoolingDescriptor, pool),
                  (L.cudnnDestroyActivationDescriptor, act), (L.cudnnDestroyLRNDescriptor, lrn),
                  (L.cudnnDestroyRNNDescriptor, rnn), (L.cudnnDestroyDropoutDescriptor, dropout),
                  (L.cudnnDestroyRNNDataDescriptor, data), (L.cudnnDestroyCTCLossDescriptor, ctc)):
        fn(d)


def test_version_and_error_strings() -> None:
    assert L.cudnnGetVersion() >= 90000
    assert L.cudnnGetProperty(L.libraryPropertyType["MAJOR_VERSION"]) == 9
    assert L.cudnnGetErrorString(L.cudnnStatus["CUDNN_STATUS_BAD_PARAM"]) == "CUDNN_STATUS_BAD_PARAM"
    assert isinstance(L.cudnnGetLastErrorString(), str)


# -- status translation ----------------------------------------------------------------------------

def test_bad_param_status_raises_with_name_message_and_call() -> None:
    x = L.cudnnCreateTensorDescriptor()
    with pytest.raises(cudnn.CudnnBadParamError) as info:
        L.cudnnSetTensor4dDescriptor(x, "CUDNN_TENSOR_NCHW", "CUDNN_DATA_FLOAT", -1, 2, 3, 4)
    err = info.value
    assert isinstance(err, cudnn.CudnnError) and isinstance(err, ValueError)
    assert err.status == 2000 and err.status_name == "CUDNN_STATUS_BAD_PARAM"
    assert "n <= 0" in err.message  # cuDNN's own last error string
    assert err.context.startswith("cudnnSetTensor4dDescriptor(") and "n=-1" in err.context
    with pytest.raises(cudnn.CudnnBadParamError, match="cudnnGetTensorSizeInBytes"):
        L.cudnnGetTensorSizeInBytes(L.NULL)  # an explicit NULL reaches cuDNN, which refuses it
    L.cudnnDestroyTensorDescriptor(x)


@pytest.mark.skipif(not _cuda.why_no_gpu(), reason="a GPU is usable here: cudnnCreate succeeds")
def test_handle_creation_without_gpu_raises_init_error() -> None:
    with pytest.raises(cudnn.CudnnInitError) as info:
        L.cudnnCreate()
    assert info.value.status_name == "CUDNN_STATUS_NOT_INITIALIZED"
    assert info.value.context == "cudnnCreate()" and "GPU" in str(info.value)


# -- bad input: Python exceptions, before C ---------------------------------------------------------

def test_wrong_argument_count_and_names() -> None:
    x = L.cudnnCreateTensorDescriptor()
    with pytest.raises(TypeError, match=r"cudnnSetTensor4dDescriptor\(\): missing a required argument: 'w'"):
        L.cudnnSetTensor4dDescriptor(x, 0, 0, 1, 2, 3)
    with pytest.raises(TypeError, match="too many positional arguments"):
        L.cudnnGetTensorSizeInBytes(x, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'height'"):
        L.cudnnSetTensor4dDescriptor(x, 0, 0, 1, 2, 3, 4, height=4)
    L.cudnnSetTensor4dDescriptor(tensorDesc=x, format=0, dataType=0, n=1, c=2, h=3, w=4)  # C names as keywords
    L.cudnnDestroyTensorDescriptor(x)


def test_wrong_argument_types() -> None:
    x = L.cudnnCreateTensorDescriptor()
    w = L.cudnnCreateFilterDescriptor()
    with pytest.raises(TypeError, match=r"cudnnSetTensor4dDescriptor\(\): h \(int\) must be an integer, got float"):
        L.cudnnSetTensor4dDescriptor(x, 0, 0, 1, 2, 3.5, 4)
    with pytest.raises(TypeError, match="n \\(int\\) must be an integer, got str"):
        L.cudnnSetTensor4dDescriptor(x, 0, 0, "1", 2, 3, 4)
    with pytest.raises(TypeError, match="lrnAlpha \\(double\\) must be a number, got NoneType"):
        L.cudnnSetLRNDescriptor(L.cudnnCreateLRNDescriptor(), 5, None, 0.75, 2.0)
    with pytest.raises(TypeError, match="must be a cudnnTensorDescriptor_t, got a cudnnFilterDescriptor_t"):
        L.cudnnGetTensorSizeInBytes(w)
    with pytest.raises(TypeError, match="must be a cudnnTensorDescriptor_t, got str"):
        L.cudnnGetTensorSizeInBytes("x")
    # Swapped enum arguments: the filter setter takes (dataType, format), the tensor one (format, dataType).
    with pytest.raises(TypeError, match="dataType .* must be a cudnnDataType_t, got cudnnTensorFormat_t"):
        L.cudnnSetFilter4dDescriptor(w, L.cudnnTensorFormat["CUDNN_TENSOR_NCHW"], L.cudnnDataType["CUDNN_DATA_FLOAT"],
                                     4, 8, 3, 3)
    with pytest.raises(ValueError, match="'CUDNN_DATA_FLOT' is not a cudnnDataType_t member"):
        L.cudnnSetTensor4dDescriptor(x, "CUDNN_TENSOR_NCHW", "CUDNN_DATA_FLOT", 1, 2, 3, 4)
    with pytest.raises(OverflowError, match="n \\(int\\) = 4294967296 is out of range"):
        L.cudnnSetTensor4dDescriptor(x, 0, 0, 2**32, 2, 3, 4)
    with pytest.raises(TypeError, match="must be an integer"):
        L.cudnnSetTensorNdDescriptor(x, 0, 2, [1, "2"], [2, 1])
    L.cudnnDestroyTensorDescriptor(x)
    L.cudnnDestroyFilterDescriptor(w)


def test_none_where_a_descriptor_is_required() -> None:
    w = L.cudnnCreateFilterDescriptor()
    conv = L.cudnnCreateConvolutionDescriptor()
    for bad in (None, 0, ctypes.c_void_p()):
        with pytest.raises(TypeError, match=r"cudnnGetConvolution2dForwardOutputDim\(\): inputTensorDesc "
                                            r"\(const cudnnTensorDescriptor_t\) must be a cudnnTensorDescriptor_t"):
            L.cudnnGetConvolution2dForwardOutputDim(conv, bad, w)
    L.cudnnDestroyFilterDescriptor(w)
    L.cudnnDestroyConvolutionDescriptor(conv)


def test_use_after_destroy_and_double_destroy() -> None:
    x = L.cudnnCreateTensorDescriptor()
    L.cudnnSetTensor4dDescriptor(x, 0, 0, 1, 2, 3, 4)
    L.cudnnDestroyTensorDescriptor(x)
    assert x.destroyed and "destroyed" in repr(x)
    with pytest.raises(cudnn.DescriptorClosedError, match="cudnnGetTensor4dDescriptor.*was already destroyed"):
        L.cudnnGetTensor4dDescriptor(x)
    with pytest.raises(cudnn.DescriptorClosedError):
        L.cudnnDestroyTensorDescriptor(x)
    with pytest.raises(cudnn.DescriptorClosedError):
        int(x)
    # Destroyed through its raw pointer: the object learns it too.
    y = L.cudnnCreateTensorDescriptor()
    L.cudnnDestroyTensorDescriptor(int(y))
    assert y.destroyed


def test_memory_arguments_are_checked_before_the_call() -> None:
    x = L.cudnnCreateTensorDescriptor()
    L.cudnnSetTensor4dDescriptor(x, 0, 0, 1, 1, 2, 2)
    host = np.zeros(4, dtype=np.float32)
    fake_handle = 1  # never reaches cuDNN: the host array is refused first
    with pytest.raises(TypeError, match=r"cudnnAddTensor\(\): A \(const void \*\) is read on the GPU, .*ndarray"):
        L.cudnnAddTensor(fake_handle, 1.0, x, host, 0.0, x, 0)
    with pytest.raises(TypeError, match="must be memory, got the descriptor"):
        L.cudnnAddTensor(fake_handle, 1.0, x, x, 0.0, x, 0)
    with pytest.raises(TypeError, match="alpha .* must be a number, got NoneType"):
        L.cudnnAddTensor(fake_handle, None, x, 0, 0.0, x, 0)
    with pytest.raises(TypeError, match="devSeqLengths .* is read on the GPU"):
        L.cudnnRNNForward(fake_handle, 1, 0, [3, 3], 1, 0, 1, 0, 1, 0, 0, None, 0, 0, 0, 0, 0, 0, 0, 0)
    L.cudnnDestroyTensorDescriptor(x)


# -- conversions ------------------------------------------------------------------------------------

class _CudaArray:
    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


def test_data_pointers_from_every_protocol() -> None:
    arr = np.arange(8, dtype=np.float32)
    assert legacy_ctypes.data_pointer(None) == (0, None)
    assert legacy_ctypes.data_pointer(0x1000) == (0x1000, None)
    assert legacy_ctypes.data_pointer(ctypes.c_void_p(0x2000)) == (0x2000, None)
    value = ctypes.c_double(1.0)
    assert legacy_ctypes.data_pointer(value) == (ctypes.addressof(value), None)
    assert legacy_ctypes.data_pointer(_CudaArray(0x3000)) == (0x3000, False)
    assert legacy_ctypes.data_pointer(arr) == (arr.ctypes.data, True)  # DLPack, CPU device
    assert legacy_ctypes.data_pointer(arr[2:]) == (arr.ctypes.data + 8, True)  # byte offset applied

    class TorchLike:
        is_cuda = True

        def data_ptr(self) -> int:
            return 0x4000

    assert legacy_ctypes.data_pointer(TorchLike()) == (0x4000, False)
    for bad in (True, "0x10", 1.5):
        with pytest.raises(TypeError):
            legacy_ctypes.data_pointer(bad)
    with pytest.raises(ValueError):
        legacy_ctypes.data_pointer(-1)


def test_scaling_factors_follow_the_tensor_data_type(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[float, bool]] = []
    real = legacy_ctypes.host_scalar
    monkeypatch.setattr(legacy_ctypes, "host_scalar", lambda v, double: seen.append((v, double)) or real(v, double))
    binding = L.cudnnAddTensor.binding
    alpha = binding.sig.params[1]
    for dtype, double in (("CUDNN_DATA_FLOAT", False), ("CUDNN_DATA_HALF", False), ("CUDNN_DATA_DOUBLE", True)):
        desc = L.cudnnCreateTensorDescriptor()
        L.cudnnSetTensor4dDescriptor(desc, "CUDNN_TENSOR_NCHW", dtype, 1, 1, 2, 2)
        binding._scale(alpha, 0.5, None, {"aDesc": desc})
        assert seen[-1] == (0.5, double)
        L.cudnnDestroyTensorDescriptor(desc)
    given = ctypes.c_double(2.0)
    assert binding._scale(alpha, given, None, {}) == ctypes.addressof(given)  # ctypes: as given


def test_set_tensor_value_is_packed_in_the_tensor_type() -> None:
    binding = L.cudnnSetTensor.binding
    value = binding.sig.params[3]
    expected = {"CUDNN_DATA_FLOAT": struct.pack("<f", 1.5), "CUDNN_DATA_DOUBLE": struct.pack("<d", 1.5),
                "CUDNN_DATA_HALF": struct.pack("<e", 1.5), "CUDNN_DATA_BFLOAT16": struct.pack("<f", 1.5)[2:],
                "CUDNN_DATA_INT32": struct.pack("<i", 3)}
    for dtype, packed in expected.items():
        desc = L.cudnnCreateTensorDescriptor()
        L.cudnnSetTensor4dDescriptor(desc, "CUDNN_TENSOR_NCHW", dtype, 1, 1, 2, 2)
        number = 3 if dtype == "CUDNN_DATA_INT32" else 1.5
        assert binding._fill(value, number, None, {"yDesc": desc}) == packed, dtype
        L.cudnnDestroyTensorDescriptor(desc)


def test_debug_callback_receives_cudnn_messages() -> None:
    got: list[tuple[object, int, int, str]] = []
    L.cudnnSetCallback(L.CUDNN_SEV_ERROR_EN, 1234, lambda sev, udata, dbg, msg: got.append((sev, udata, dbg.cudnnStatus, msg)))
    try:
        x = L.cudnnCreateTensorDescriptor()
        with pytest.raises(cudnn.CudnnBadParamError):
            L.cudnnSetTensor4dDescriptor(x, 0, 0, 0, 1, 1, 1)
        mask, udata, fptr = L.cudnnGetCallback()
        assert mask == L.CUDNN_SEV_ERROR_EN and udata == 1234 and fptr
    finally:
        L.cudnnSetCallback(0, None, None)
    assert got and got[0][0] is L.cudnnSeverity_t.CUDNN_SEV_ERROR and got[0][1] == 1234
    assert got[0][2] == 2000 and "cudnnSetTensor4dDescriptor" in got[0][3]
    L.cudnnDestroyTensorDescriptor(x)


def test_import_opens_no_library() -> None:
    code = "import cudnn.legacy as L; from cudnn._lib import loader; assert not loader.is_loaded(); print(len(L.FUNCTIONS))"
    env_path = str(ROOT / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, check=True)
    assert int(out.stdout) == len(L.SIGNATURES)
