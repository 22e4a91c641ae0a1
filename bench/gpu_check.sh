#!/usr/bin/env bash
# The GPU run of the CUDA backend, for a machine with an NVIDIA GPU and its driver (about 6 minutes).
#
#   bash bench/gpu_check.sh [OUT_DIR]      (default OUT_DIR: bench/results)
#
# Runs, each step under its own time limit, logging everything to OUT_DIR/gpu_check.log:
#   1. the CUDA unit tests: runtime (driver API, NVRTC), renderer, kernels run on the GPU (the
#      emulated-CUDA value tests run against the real device too when a driver is found);
#   2. the conformance suite on CUDA (one GPU: CUDA=1,CLANG, so sharded programs run on CLANG and
#      every single-device program and copy may use the GPU), and on CUDA:0,CUDA:1 when two GPUs exist;
#   3. the benchmarks on CUDA and CLANG against numpy (and torch when importable), written as
#      OUT_DIR/gpu.{json,md,png}.
# Needs no installation: the repository root goes on PYTHONPATH, and numpy, llvmlite, pytest,
# pytest-xdist, hypothesis, tqdm and the NVRTC wheel must be importable by $PYTHON (default python3).
# Exit status: 0 when every step passed.
set -u -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT_DIR=${1:-bench/results}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
: >"$LOG"
failed=()

step() {  # step NAME SECONDS COMMAND...: run it under `timeout`, log it, remember a failure
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($limit s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

nvidia-smi -L 2>&1 | tee -a "$LOG"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
jobs=$(( $(nproc) < 8 ? $(nproc) : 8 ))

step unit 120 "$PY" -m pytest -q -n "$jobs" tests/fast/test_cuda_runtime.py tests/fast/test_renderer_cuda.py \
  tests/fast/test_cuda_emulated.py tests/fast/test_compile.py
step conformance-cuda 75 "$PY" -m conformance --devices CUDA=1,CLANG --examples 400 --time-limit 40 --jobs "$jobs"
if [ "${gpus:-0}" -ge 2 ]; then
  step conformance-two-gpus 75 "$PY" -m conformance --devices CUDA=2 --max-devices 2 --examples 400 \
    --time-limit 40 --jobs "$jobs"
else
  echo "=== conformance-two-gpus: skipped, $gpus GPU(s) here" | tee -a "$LOG"
fi
# a chosen subset: the whole suite with the 16-core CPU's numpy peers ran past 90 s at matmul_1024
# on an H200 host (session 9); each workload here takes a few seconds
step bench 150 "$PY" -m bench --devices CUDA,CLANG --only elementwise,sum,row_sum,col_sum,softmax,layernorm,take,matmul_512,matmul_bt_512,attn_scores \
  --budget 0.5 --max-repeats 8 --peers torch --no-png --out-dir "$OUT_DIR" --out-prefix gpu

if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu_check: every step passed" | tee -a "$LOG"
else
  echo "gpu_check: failed steps: ${failed[*]}" | tee -a "$LOG"
  exit 1
fi
