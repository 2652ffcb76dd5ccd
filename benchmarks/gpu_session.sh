#!/usr/bin/env bash
# One device-machine call: environment, GPU correctness tests, kernel tuning tables,
# and the guard itself. Phases are chosen by name so a call fits the 10-minute limit:
#   benchmarks/gpu_session.sh env tests tune guard
# Everything lands in $OUT (or ./gpu-out) with a log per phase.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export ATTN_GUARD_CACHE=${ATTN_GUARD_CACHE:-/tmp/attn-guard-cache}

phase() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date +%T))"
  local t0=$SECONDS
  timeout --signal=KILL "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- $name: exit $rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

for p in "$@"; do
  case $p in
    env)
      phase env 120 bash -c 'nvidia-smi; python3 -c "import torch, triton, scipy, numpy, jinja2, yaml; print(torch.__version__, torch.version.cuda, triton.__version__, scipy.__version__, numpy.__version__); print(torch.cuda.get_device_name(0))"; nvcc --version | tail -2' ;;
    tests)
      phase tests-triton 400 python3 -m pytest tests/test_triton_flash.py -m gpu -x -q -ra -p no:cacheprovider
      phase tests-cuda 400 python3 -m pytest tests/test_cuda_flash.py -m gpu -x -q -ra -p no:cacheprovider ;;
    faults)
      phase tests-faults 300 python3 -m pytest tests -m gpu -q -ra -p no:cacheprovider -k "fault or illegal" ;;
    tune)
      phase tune 420 python3 benchmarks/tune_triton.py --out "$OUT" ;;
    bench-cuda)
      SHOW_PTXAS=1 phase bench-cuda 300 python3 benchmarks/bench_cuda_flash.py ;;
    check)
      phase check 300 python3 -m guard check --out "$OUT/check.json" ;;
    guard)
      phase guard-run 540 python3 -m guard run --out "$OUT/run.json" --markdown "$OUT/run.md" ;;
    refresh)
      phase refresh 540 python3 -m guard baseline refresh --dir "$OUT" --markdown "$OUT/refresh.md" ;;
    compare)
      phase compare 540 python3 -m guard compare --baselines baselines --out "$OUT/compare.json" --markdown "$OUT/compare.md" --html "$OUT/compare.html" ;;
    calibrate)
      phase calibrate "${CAL_LIMIT:-560}" python3 benchmarks/calibrate.py collect --out "$OUT" --seconds "${CAL_SECONDS:-500}" ;;
    *) echo "unknown phase $p" ;;
  esac
done
