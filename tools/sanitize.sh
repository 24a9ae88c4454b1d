#!/usr/bin/env bash
# compute-sanitizer over a selection of GPU tests: memcheck with --leak-check full over conv,
# matmul, norms and attention; racecheck over a small subset. Prints one summary line per run
# ("reliability: sanitizer ...") with the error counts; full logs go to $SANITIZE_OUT.
#
# Filter (documented): cuda-bindings resolves every driver entry point it knows through
# cuGetProcAddress, and entry points the installed driver lacks answer CUDA_ERROR_NOT_FOUND.
# compute-sanitizer reports each as an API error though nothing failed: those, and only those,
# are subtracted from the error count ("benign lookups" in the summary). Every other API error
# and every memory error counts. Leaks are counted per allocating library from each leak's
# host backtrace: memory that torch's caching allocator or a module-level tensor still holds at
# exit is not freed by design (PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes torch free eagerly), so
# the figure that must be zero is the one attributed to cuDNN and cudnn-py.
#
# Usage: tools/sanitize.sh [memcheck|racecheck|all]   (default all; ~200 s on an H200)
set -u
cd "$(dirname "$0")/.."
OUT=${SANITIZE_OUT:-/tmp/cudnn-py-sanitize}
mkdir -p "$OUT"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
PYTEST=(python3 -m pytest -q -p no:cacheprovider -x)

MEMCHECK_SELECTION=(
  "tests/gpu/test_pygraph_ops.py::test_fused_conv_bias_relu_resnet_shape"
  "tests/gpu/test_pygraph_ops.py::test_conv_dgrad_and_wgrad_match_autograd"
  "tests/gpu/test_pygraph_ops.py::test_matmul_with_batch_broadcast"
  "tests/gpu/test_pygraph_ops.py::test_fused_matmul_bias_gelu"
  "tests/gpu/test_pygraph_ops.py::test_execute_refuses_bad_buffers_before_any_kernel_runs"
  "tests/gpu/test_norm_gpu.py::test_layernorm_forward"
  "tests/gpu/test_norm_gpu.py::test_rmsnorm_backward"
  "tests/gpu/test_sdpa_gpu.py::test_sdpa_forward"
)
RACECHECK_SELECTION=(
  "tests/gpu/test_pygraph_ops.py::test_fused_matmul_bias_gelu"
  "tests/gpu/test_norm_gpu.py::test_layernorm_forward"
  "tests/gpu/test_sdpa_gpu.py::test_sdpa_inference"
)

summarize() {  # $1 tool, $2 log, $3 sanitizer exit status
  local log=$2 total benign other leaks races by_owner
  total=$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?$' "$log" | awk '{s += $3} END {print s + 0}')
  races=$(grep -Eo 'RACECHECK SUMMARY: [0-9]+ hazards displayed \([0-9]+ errors' "$log" | awk '{gsub(/\(/, "", $6); s += $6} END {print s + 0}')
  benign=$(grep -c 'CUDA API call to cuGetProcAddress' "$log")
  other=$(grep -E 'Program hit .* on CUDA API call to' "$log" | grep -vc 'cuGetProcAddress')
  leaks=$(grep -Eo 'LEAK SUMMARY: [0-9]+ bytes leaked in [0-9]+ allocations' "$log" | awk '{s += $7} END {print s + 0}')
  local leaked_bytes
  leaked_bytes=$(grep -Eo 'LEAK SUMMARY: [0-9]+ bytes' "$log" | awk '{s += $3} END {print s + 0}')
  # owner of each printed leak: the first frame outside the CUDA runtime / driver / cuda-bindings
  by_owner=$(awk '
    /Leaked [0-9,]+ bytes/ {pending = 1; next}
    pending && /Host Frame/ {
      if ($0 ~ /libcudart|libcuda\.so|cydriver|cyruntime|driver\.cpython|runtime\.cpython/) next
      if ($0 ~ /libcudnn/) o = "cudnn"; else if ($0 ~ /libtorch|libc10/) o = "torch"; else o = "other"
      n[o]++; pending = 0 }
    END {for (o in n) printf "%s %d; ", o, n[o]}' "$log")
  local memory=$((total + races - benign - other - leaks))
  echo "reliability: sanitizer $1: exit $3, memory/race errors $memory, leaks $leaks allocations ($leaked_bytes B;" \
       "printed ones by allocator: ${by_owner:-none}), API errors $other, benign cuGetProcAddress lookups filtered" \
       "$benign; log $log"
}

run_tool() {  # $1 tool, rest: tests
  local tool=$1; shift
  local log="$OUT/$tool.log" extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  timeout "${SANITIZE_TIMEOUT:-170}" compute-sanitizer --tool "$tool" "${extra[@]}" --target-processes all \
    --log-file "$log" --print-limit 100000 "${PYTEST[@]}" "$@" > "$OUT/$tool.pytest.txt" 2>&1
  local status=$?
  tail -1 "$OUT/$tool.pytest.txt"
  summarize "$tool" "$log" "$status"
}

case "${1:-all}" in
  memcheck) run_tool memcheck "${MEMCHECK_SELECTION[@]}" ;;
  racecheck) run_tool racecheck "${RACECHECK_SELECTION[@]}" ;;
  all) run_tool memcheck "${MEMCHECK_SELECTION[@]}"; run_tool racecheck "${RACECHECK_SELECTION[@]}" ;;
  *) echo "usage: $0 [memcheck|racecheck|all]" >&2; exit 2 ;;
esac
