#!/usr/bin/env bash
# compute-sanitizer over a selection of GPU tests: memcheck with --leak-check full over conv,
# matmul, norms and attention; racecheck over a small subset. Prints one summary line per run
# ("reliability: sanitizer ...") with the error counts, the largest leaked-allocation stacks
# (attributed to torch, cuDNN through cudnn-py, cuda-bindings or other) and, for racecheck, the
# kernels with hazards; full logs go to $SANITIZE_OUT.
#
# Clean exit: the sanitized pytest loads tools/sanitize_support.py as a plugin. Torch computes
# the references without cuDNN (torch never destroys its own cuDNN handles), and after the last
# test the plugin clears the locals of finished Python frames and the closure cells of the test
# files' functions (compute-sanitizer keeps the Python frames of every allocation's backtrace,
# and through them the tensors and graphs those frames and functions held), empties the plan
# cache, destroys every cuDNN handle, frees torch's cuBLAS workspaces and its cached device and
# pinned host blocks, then resets the CUDA context (cudaDeviceReset) and leaves with os._exit:
# the reset is when the leak check counts what is still allocated. (A normal exit leaves the
# context to the runtime's teardown after the libraries' static destructors; under the
# sanitizer with torch loaded that teardown ends in a signal and the leak check is incomplete.
# CUDNN_PY_SANITIZE_RESET=0 still does it that way.) CUDNN_PY_SANITIZE_HOLDERS=1 prints what
# is still alive and what holds it.
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes torch free each block as soon as it is dropped.
#
# Filters (documented): cuda-bindings resolves every driver entry point it knows through
# cuGetProcAddress, and entry points the installed driver lacks answer CUDA_ERROR_NOT_FOUND.
# compute-sanitizer reports each as an API error though nothing failed: those, and only those,
# are subtracted from the error count ("benign lookups" in the summary). Leaks whose backtrace
# is torch's cuBLAS handle creation (cublasCreate from at::cuda::getCurrentCUDABlasHandle:
# torch keeps its handle pool to the end of the process by design and offers no call to
# destroy it) are listed and not counted, and so are the allocations the context reset makes
# for itself (their backtrace is the plugin's reset_context, run after everything else was
# released). Every other API error, memory error and leak counts.
#
# Usage: tools/sanitize.sh [memcheck|racecheck|all]   (default all)
set -u
cd "$(dirname "$0")/.."
OUT=${SANITIZE_OUT:-/tmp/cudnn-py-sanitize}
mkdir -p "$OUT"
export PYTHONPATH=src:tools${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
PYTEST=(python3 -m pytest -q -p no:cacheprovider -p sanitize_support -x)

MEMCHECK_SELECTION=(
  "tests/graph/test_pygraph_ops_gpu.py::test_fused_conv_bias_relu_resnet_shape"
  "tests/graph/test_pygraph_ops_gpu.py::test_conv_dgrad_and_wgrad_match_autograd"
  "tests/graph/test_pygraph_ops_gpu.py::test_matmul_with_batch_broadcast"
  "tests/graph/test_pygraph_ops_gpu.py::test_fused_matmul_bias_gelu"
  "tests/graph/test_pygraph_ops_gpu.py::test_execute_refuses_bad_buffers_before_any_kernel_runs"
  "tests/graph/test_norm_gpu.py::test_layernorm_forward"
  "tests/graph/test_norm_gpu.py::test_rmsnorm_backward"
  "tests/graph/test_sdpa_gpu.py::test_sdpa_forward"
)
RACECHECK_SELECTION=(
  "tests/graph/test_pygraph_ops_gpu.py::test_fused_matmul_bias_gelu"
  "tests/graph/test_norm_gpu.py::test_layernorm_forward"
  "tests/graph/test_sdpa_gpu.py::test_sdpa_inference"
)

run_tool() {  # $1 tool, rest: tests
  local tool=$1; shift
  local log="$OUT/$tool.log" extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  timeout "${SANITIZE_TIMEOUT:-170}" compute-sanitizer --tool "$tool" "${extra[@]}" --target-processes all \
    --log-file "$log" --print-limit 100000 "${PYTEST[@]}" "$@" > "$OUT/$tool.pytest.txt" 2>&1
  local status=$?
  grep -E ' passed| failed| error|sanitize cleanup|sanitize reset|sanitize holders|held by|  tensors ' "$OUT/$tool.pytest.txt" | tail -12
  python3 tools/sanitize_support.py report "$tool" "$log" "$status"
}

case "${1:-all}" in
  memcheck) run_tool memcheck "${MEMCHECK_SELECTION[@]}" ;;
  racecheck) run_tool racecheck "${RACECHECK_SELECTION[@]}" ;;
  all) run_tool memcheck "${MEMCHECK_SELECTION[@]}"; run_tool racecheck "${RACECHECK_SELECTION[@]}" ;;
  *) echo "usage: $0 [memcheck|racecheck|all]" >&2; exit 2 ;;
esac
