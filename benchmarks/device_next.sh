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
  *:1) benchmarks/gpu_session.sh ncu-gluon  # profiles of the dispatched Gluon kernels
       PHASE_LIMIT=250 benchmarks/pr_check_proof.sh same against ;;
  *:2) CAL_SECONDS=400 CAL_LIMIT=420 benchmarks/gpu_session.sh calibrate ;;
  *:3)  # after a kernel change: the dispatch checked (plan path too), then re-recorded
    # (the refresh phase skips itself when the gate failed), then the proof against it
    GLUON_PROVIDERS=triton,triton+gluon GLUON_PAIRED= GLUON_BUDGET=110 \
      benchmarks/gpu_session.sh gluon gluon-gate refresh
    if cp "$OUT"/nvidia-*.json baselines/ 2> /dev/null; then
      PHASE_LIMIT=120 benchmarks/pr_check_proof.sh same
    fi ;;
esac
benchmarks/gpu_session.sh pack
ls -la "${OUT:-gpu-out}"
