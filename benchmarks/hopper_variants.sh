#!/usr/bin/env bash
# Tile variants of the CUDA C++ kernel's Hopper path, in one GPU call: every variant's
# extension built at once (each is its own cached build), then, one variant at a time,
# the GPU tests (the first TESTED variants) and benchmarks/cuda_vs_cudnn.py.
# Each argument is one build's ATTN_GUARD_HOPPER_FLAGS ("" is the defaults), e.g.
#   OUT=/tmp/v HEAD_DIM=64 bash benchmarks/hopper_variants.sh "" "-DFLASH_SM90_D64_STAGES=3"
# Env: ROUNDS (2), HEAD_DIM (64 or 128: only those shapes, except for the first variant,
# which times every shape), TESTED (1: how many variants, from the first, get the GPU
# tests), PACK (1: everything in $OUT/variants.tgz). Writes $OUT/variant-<i>.json (the
# benchmark's rows) and a log per step.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH
ROUNDS=${ROUNDS:-2}
TESTED=${TESTED:-1}
build_cuda_variants "$@"

i=0
for flags in "$@"; do
  i=$((i + 1))
  echo "=== variant $i: '${flags}'"
  if (( i <= TESTED )); then
    t0=$SECONDS
    ATTN_GUARD_HOPPER_FLAGS=$flags timeout 300 python3 -m pytest tests/test_cuda_flash.py -m gpu \
      -q -x -p no:cacheprovider > "$OUT/tests-$i.log" 2>&1
    echo "    tests: exit $? in $((SECONDS - t0)) s; $(tail -n 1 "$OUT/tests-$i.log")"
  fi
  only=()
  (( i > 1 )) && [ -n "${HEAD_DIM:-}" ] && only=(--head-dim "$HEAD_DIM")
  ATTN_GUARD_HOPPER_FLAGS=$flags timeout 300 python3 benchmarks/cuda_vs_cudnn.py --no-mma-sync \
    --rounds "$ROUNDS" --json "$OUT/variant-$i.json" "${only[@]}" > "$OUT/bench-$i.log" 2>&1
  echo "    benchmark: exit $?"
  grep -E "^[0-9]+,[0-9]+" "$OUT/bench-$i.log"
done
if [ "${PACK:-0}" = 1 ]; then  # one file for a runner that returns few
  tar -C "$OUT" -czf /tmp/variants.tgz . && find "$OUT" -type f -delete && mv /tmp/variants.tgz "$OUT/"
fi
