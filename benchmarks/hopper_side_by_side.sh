#!/usr/bin/env bash
# Tuning builds of the CUDA kernel's Hopper path side by side with the defaults,
# FlashAttention-3 and cuDNN: every build made at once, then (phase `ncu`) Nsight Compute's
# pipes of every arm (ncu_pipes.py) and (phase `time`) interleaved rounds of every arm in
# one process (side_by_side.py), each output checked against a float32 reference first.
# Each argument is one build's flags (side_by_side.py's cuda_flash:FLAGS arm), e.g.
#   OUT=/tmp/v PHASES="ncu time" bash benchmarks/hopper_side_by_side.sh "-DFLASH_SM90_Q_STAGES=1"
# Env: PHASES ("time"), SET (side_by_side.py's set, "table"), ROUNDS (3), ARMS (the arms
# before the builds: "sdpa fa3 cuda_flash gluon_flash"), NCU_SHAPES (ncu_pipes.py --shape
# values, space-separated), NCU_LIMIT and TIME_LIMIT (seconds per phase: 300, 500).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH
t0=$SECONDS
build_cuda_variants "" "$@"  # the defaults too: the cuda_flash arm's build

read -r -a arms <<< "${ARMS:-sdpa fa3 cuda_flash gluon_flash}"
for flags in "$@"; do arms+=("cuda_flash:$flags"); done
for phase in ${PHASES:-time}; do
  case $phase in
    ncu)
      shapes=()
      for shape in ${NCU_SHAPES:-1,16,16384,128,causal,bfloat16}; do shapes+=(--shape "$shape"); done
      timeout "${NCU_LIMIT:-300}" python3 benchmarks/ncu_pipes.py --out "$OUT" "${shapes[@]}" \
        --arms "${arms[@]}" > "$OUT/ncu.log" 2>&1
      echo "=== ncu: exit $? at $((SECONDS - t0)) s"
      cat "$OUT/ncu-pipes.md" 2>/dev/null || tail -n 20 "$OUT/ncu.log" ;;
    time)
      timeout "${TIME_LIMIT:-500}" python3 benchmarks/side_by_side.py --set "${SET:-table}" \
        --rounds "${ROUNDS:-3}" --out "$OUT" --arms "${arms[@]}"
      echo "=== side by side: exit $? at $((SECONDS - t0)) s" ;;
    *) echo "unknown phase: $phase (ncu, time)" >&2; exit 2 ;;
  esac
done
