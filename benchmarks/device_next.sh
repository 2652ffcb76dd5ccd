#!/usr/bin/env bash
# The device calls that issues 12 and 14 still need, on whichever card the call lands
# (a call asking for an H200 may get an H100). Each call fits the 10-minute limit:
#   benchmarks/device_next.sh 1   H200: the baseline refresh, then the PR-check proof
#                                 against it (unchanged, planted); H100: the persistent
#                                 Gluon variant checked and timed side by side
#   benchmarks/device_next.sh 2   H200: a sustained pool and the portable kernel's plant
#                                 at the power cap; H100: a 40-round sustained pool
#   benchmarks/device_next.sh 3   after a dispatch change: checks, refresh, proof
# Results in $OUT, packed (a call returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu-out} PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu, call ${1:-1}"
case "$gpu:${1:-1}" in
  *H200*:1) timeout 250 benchmarks/pr_check_proof.sh refresh
            cp "$OUT"/nvidia-h200*.json baselines/ && git status --short baselines/
            timeout 300 benchmarks/pr_check_proof.sh same overlap-off ;;
  *H200*:2) timeout 150 benchmarks/pr_check_proof.sh ws-off
            CAL_SECONDS=380 CAL_LIMIT=400 benchmarks/gpu_session.sh calibrate ;;
  *:1) timeout 300 python3 benchmarks/bench_gluon.py --out "$OUT/persistent" --no-host \
         --budget-s 280 --providers sdpa,gluon-ws-persistent \
         --paired sdpa,triton,gluon-ws-persistent,gluon-ws:STAGES=2:hd=128 --rounds 25 \
         > "$OUT/persistent.log" 2>&1
       tail -32 "$OUT/persistent.log" ;;
  *:2) CAL_SECONDS=400 CAL_LIMIT=420 benchmarks/gpu_session.sh calibrate ;;
  *:3)  # after a dispatch change: check it (plan path too), re-record, prove the baseline
    timeout 120 python3 benchmarks/bench_gluon.py --out "$OUT/final" --no-host --budget-s 110 \
      --providers triton,triton+gluon --paired "" > "$OUT/final.log" 2>&1
    grep -A4 "== correctness" "$OUT/final.log"
    if python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; sys.exit(0 if r and all(x.get("ok") and not x.get("error") for x in r) else 1)' "$OUT/final/results.jsonl"; then
      timeout 250 benchmarks/pr_check_proof.sh refresh
      cp "$OUT"/nvidia-*.json baselines/
      timeout 100 benchmarks/pr_check_proof.sh same
    else echo "dispatch checks failed: no refresh"; fi ;;
esac
benchmarks/gpu_session.sh pack
ls -la "${OUT:-gpu-out}"
