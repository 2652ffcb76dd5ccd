#!/usr/bin/env bash
# The device calls that issue 12 still needs, on whichever card the call lands (a call
# asking for an H200 may get an H100). Each call fits the 10-minute limit:
#   benchmarks/device_next.sh 1   H200: the baseline refresh, then the proof against it
#                                 (PR check of an unchanged tree; `guard compare --against`
#                                 with a planted regression); H100: the same proof against
#                                 the committed H100 baseline, after an ncu profile of the
#                                 dispatched kernels (benchmarks/ncu_gluon.py)
#   benchmarks/device_next.sh 2   H200: a sustained pool and the portable kernel's plant
#                                 at the power cap; H100: a 40-round sustained pool
#   benchmarks/device_next.sh 3   after a kernel change: checks, refresh, proof
# Results in $OUT, packed (a call returns at most 8 files).
set -uo pipefail
# Limits go to the guard's own processes (PHASE_LIMIT): a `timeout` around a script
# kills the script and leaves its child running beside the next phase.
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu-out} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu, call ${1:-1}"
case "$gpu:${1:-1}" in
  *H200*:1) PHASE_LIMIT=330 benchmarks/pr_check_proof.sh refresh
            cp "$OUT"/nvidia-h200*.json baselines/ && git status --short baselines/
            PHASE_LIMIT=200 benchmarks/pr_check_proof.sh same against ;;
  *H200*:2) PHASE_LIMIT=150 benchmarks/pr_check_proof.sh ws-off
            CAL_SECONDS=380 CAL_LIMIT=400 benchmarks/gpu_session.sh calibrate ;;
  *:1) benchmarks/gpu_session.sh ncu-gluon  # the dispatched hd-64 causal kernel's profile
       PHASE_LIMIT=250 benchmarks/pr_check_proof.sh same against ;;
  *:2) CAL_SECONDS=400 CAL_LIMIT=420 benchmarks/gpu_session.sh calibrate ;;
  *:3)  # after a dispatch change: check it (plan path too), re-record, prove the baseline
    timeout 120 python3 benchmarks/bench_gluon.py --out "$OUT/final" --no-host --budget-s 110 \
      --providers triton,triton+gluon --paired "" > "$OUT/final.log" 2>&1
    grep -A4 "== correctness" "$OUT/final.log"
    if python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; sys.exit(0 if r and all(x.get("ok") and not x.get("error") for x in r) else 1)' "$OUT/final/results.jsonl"; then
      PHASE_LIMIT=330 benchmarks/pr_check_proof.sh refresh
      cp "$OUT"/nvidia-*.json baselines/
      PHASE_LIMIT=120 benchmarks/pr_check_proof.sh same
    else echo "dispatch checks failed: no refresh"; fi ;;
esac
benchmarks/gpu_session.sh pack
ls -la "${OUT:-gpu-out}"
