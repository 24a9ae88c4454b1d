"""The cudnn-python-wrappers README example, ported to cuDNN 9 and `cudnn.legacy`.

Needs: an NVIDIA GPU, PyTorch with CUDA (CuPy too with --cupy), cuDNN 9
(pip install cudnn-py[cu13] or [cu12]).

A forward convolution through cuDNN's classic C API, one C call per line as in the old
PyCUDA example, on PyTorch memory (or CuPy memory with --cupy), checked against PyTorch.

What changed since the cuDNN 6 version of this example:

- cudnnGetConvolutionForwardAlgorithm and cudnnConvolutionFwdPreference were removed in
  cuDNN 8. Algorithms now come ranked: by heuristics from
  cudnnGetConvolutionForwardAlgorithm_v7, or measured by cudnnFindConvolutionForwardAlgorithm.
  Both return perf structs; the math type of the chosen one is set on the descriptor.
- Results are Python values: ``algo`` and ``ws_size`` are ints (no ``.value``), and tensors
  are passed as they are (any ``__cuda_array_interface__`` / DLPack tensor) instead of
  ``ctypes.c_void_p(int(X.gpudata))``.
- beta is 0.0: the old example accumulated (beta = 1.0) into an uninitialised Y.

    python examples/legacy_convolution.py              # the README's sizes
    python examples/legacy_convolution.py --n 8 --c 32 --k 32 --size 28
"""

from __future__ import annotations

import sys

from _needs import need_gpu_and_torch, parser, positive_int


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--n", type=positive_int, default=64, help="batch size (README: 64)")
    ap.add_argument("--c", type=positive_int, default=128, help="input channels (README: 128)")
    ap.add_argument("--k", type=positive_int, default=128, help="output channels (README: 128)")
    ap.add_argument("--size", type=positive_int, default=112, help="input height and width (README: 112)")
    ap.add_argument("--filter", type=positive_int, default=7, help="filter height and width (README: 7)")
    ap.add_argument("--cupy", action="store_true", help="run on CuPy arrays instead of torch tensors")
    args = ap.parse_args(argv)
    torch = need_gpu_and_torch(__file__)
    import torch.nn.functional as F

    from cudnn import legacy as libcudnn

    if args.cupy:
        try:
            import cupy  # noqa: F401 - only checked for here
        except ImportError:
            sys.exit("legacy_convolution.py --cupy needs CuPy (pip install cupy-cuda13x or cupy-cuda12x)")
    torch.manual_seed(0)

    # Create a cuDNN context, working on PyTorch's current stream
    cudnn_context = libcudnn.cudnnCreate()
    libcudnn.cudnnSetStream(cudnn_context, torch.cuda.current_stream())

    # Set some options and tensor dimensions
    tensor_format = libcudnn.cudnnTensorFormat["CUDNN_TENSOR_NCHW"]
    data_type = libcudnn.cudnnDataType["CUDNN_DATA_FLOAT"]
    convolution_mode = libcudnn.cudnnConvolutionMode["CUDNN_CROSS_CORRELATION"]

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def start_bench() -> None:
        start.record()

    def end_bench(op: str) -> None:
        end.record()
        end.synchronize()
        print("%s: %7.3f msecs" % (op, start.elapsed_time(end)))

    n_input, filters_in, filters_out = args.n, args.c, args.k
    height_in = width_in = args.size
    height_filter = width_filter = args.filter
    pad_h = pad_w = args.filter // 2
    vertical_stride = horizontal_stride = 1
    dilation_h = dilation_w = 1  # the README's upscalex / upscaley
    alpha, beta = 1.0, 0.0

    # Input tensor and filters, on the GPU
    X = torch.rand(n_input, filters_in, height_in, width_in, device="cuda")
    filters = torch.rand(filters_out, filters_in, height_filter, width_filter, device="cuda")

    # Descriptor for input
    X_desc = libcudnn.cudnnCreateTensorDescriptor()
    libcudnn.cudnnSetTensor4dDescriptor(X_desc, tensor_format, data_type, n_input, filters_in, height_in, width_in)

    # Filter descriptor (note the order: data type first, then format)
    filters_desc = libcudnn.cudnnCreateFilterDescriptor()
    libcudnn.cudnnSetFilter4dDescriptor(filters_desc, data_type, tensor_format, filters_out, filters_in,
                                        height_filter, width_filter)

    # Convolution descriptor
    conv_desc = libcudnn.cudnnCreateConvolutionDescriptor()
    libcudnn.cudnnSetConvolution2dDescriptor(conv_desc, pad_h, pad_w, vertical_stride, horizontal_stride,
                                             dilation_h, dilation_w, convolution_mode, data_type)

    # Get output dimensions (first two values are n_input and filters_out)
    _, _, height_output, width_output = libcudnn.cudnnGetConvolution2dForwardOutputDim(conv_desc, X_desc,
                                                                                        filters_desc)

    # Output tensor
    Y = torch.empty(n_input, filters_out, height_output, width_output, device="cuda")
    Y_desc = libcudnn.cudnnCreateTensorDescriptor()
    libcudnn.cudnnSetTensor4dDescriptor(Y_desc, tensor_format, data_type, n_input, filters_out, height_output,
                                        width_output)

    # The memory cuDNN reads and writes: the torch tensors themselves, or CuPy views of them
    X_data, filters_data, Y_data = X, filters, Y
    if args.cupy:
        import cupy

        X_data, filters_data, Y_data = cupy.asarray(X), cupy.asarray(filters), cupy.asarray(Y)

    # Choose the algorithm: ranked by heuristics (_v7), then measured (Find)
    algo_count = libcudnn.cudnnGetConvolutionForwardAlgorithmMaxCount(cudnn_context)
    ranked = libcudnn.cudnnGetConvolutionForwardAlgorithm_v7(cudnn_context, X_desc, filters_desc, conv_desc,
                                                             Y_desc, algo_count)
    print("heuristics rank:", ", ".join(libcudnn.cudnnConvolutionFwdAlgo_t(p.algo).name for p in ranked
                                       if p.status == 0))
    measured = libcudnn.cudnnFindConvolutionForwardAlgorithm(cudnn_context, X_desc, filters_desc, conv_desc,
                                                             Y_desc, algo_count)
    for perf in measured:
        print("  ", perf)
    perf = next(p for p in measured if p.status == 0)
    algo = perf.algo
    libcudnn.cudnnSetConvolutionMathType(conv_desc, perf.mathType)
    print("Cudnn algorithm = %d (%s)" % (algo, libcudnn.cudnnConvolutionFwdAlgo_t(algo).name))

    ws_size = libcudnn.cudnnGetConvolutionForwardWorkspaceSize(cudnn_context, X_desc, filters_desc, conv_desc,
                                                               Y_desc, algo)
    ws_data = torch.empty(ws_size, dtype=torch.uint8, device="cuda") if ws_size > 0 else None

    start_bench()

    libcudnn.cudnnConvolutionForward(cudnn_context, alpha, X_desc, X_data, filters_desc, filters_data, conv_desc,
                                     algo, ws_data, ws_size, beta, Y_desc, Y_data)

    end_bench("fprop")

    ws_data = None

    # Check against PyTorch, computed in float64
    reference = F.conv2d(X.double(), filters.double(), stride=(vertical_stride, horizontal_stride),
                         padding=(pad_h, pad_w), dilation=(dilation_h, dilation_w))
    error = ((Y.double() - reference).abs().max() / reference.abs().max()).item()
    # TF32 tensor cores (allowed by every math type but FMA on Ampere and later) round the inputs to 10 bits.
    tolerance = 2e-4 if perf.mathType == libcudnn.cudnnMathType["CUDNN_FMA_MATH"] else 2e-3
    ok = error <= tolerance
    print("max error relative to PyTorch's largest output: %.2e (tolerance %.0e): %s"
          % (error, tolerance, "match" if ok else "MISMATCH"))

    # Clean up
    libcudnn.cudnnDestroyTensorDescriptor(X_desc)
    libcudnn.cudnnDestroyTensorDescriptor(Y_desc)
    libcudnn.cudnnDestroyFilterDescriptor(filters_desc)
    libcudnn.cudnnDestroyConvolutionDescriptor(conv_desc)
    libcudnn.cudnnDestroy(cudnn_context)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
