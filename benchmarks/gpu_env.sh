# shellcheck shell=bash
# Sourced by the GPU scripts, after their `set -uo pipefail`: the repository root as the
# working directory, $OUT made (default ./gpu-out), the offline nvidia-cutlass wheel (.whl/)
# installed where its headers are missing (install_offline_wheels.sh), this tree first
# on PYTHONPATH, and one build cache for the CUDA extension across every process.
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
bash benchmarks/install_offline_wheels.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export ATTN_GUARD_CACHE=${ATTN_GUARD_CACHE:-/tmp/attn-guard-cache}

# Builds the CUDA extension once per argument (one build's ATTN_GUARD_HOPPER_FLAGS; ""
# is the defaults), all at once with the cores shared among them, each logging to
# $OUT/build-<i>.log (i from 1); prints the count and the time they took.
build_cuda_variants() {
  local t0=$SECONDS i=0 jobs=$(( $(nproc) / $# ))
  (( jobs < 1 )) && jobs=1
  for flags in "$@"; do
    i=$((i + 1))
    ATTN_GUARD_HOPPER_FLAGS=$flags MAX_JOBS=$jobs python3 -c \
      'import torch; from kernels import cuda_flash; cuda_flash.load_extension(torch.cuda.get_device_capability())' \
      > "$OUT/build-$i.log" 2>&1 &
  done
  wait
  echo "=== $# builds in $((SECONDS - t0)) s (${jobs} jobs each)"
}

