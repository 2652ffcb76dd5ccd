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
