#!/usr/bin/env bash
# Sharding on a host with several GPUs: the PR check with --gpus 1 and --gpus 2
# (GPU_SPLIT: --gpu-split, "rounds" by default, or "cases").
# Run from the repository root (PYTHONPATH=.); everything goes under $OUT, summed up in
# $OUT/shard-proof.json (for benchmarks/shard_plot.py) and the logs in $OUT/shard-logs.tgz.
# Phases (SKIP="c" skips phase c), run b, a, c (the full suite's ratio first: it is
# what the time at hand must reach); all of them within TOTAL_LIMIT seconds
# (default 570), each within PHASE_LIMIT (default 300) and what is left of the total:
#   c  a planted regression (hd-64 causal Gluon without overlap, pr_check_proof.sh's
#      overlap-off) with --gpus 2: must fail (exit 1) on the planted gluon_flash cases
#   a  default suite, unchanged tree, every case timed (--time-identical), with --gpus 1
#      then --gpus 2: the verdict and every case's verdict must agree; wall times
#   b  the full suite timed, --gpus 2 then --gpus 1: the wall-time ratio. 160 cases at
#      6 rounds a side (about 10 minutes on one H100) do not fit one run beside a and
#      c, so this measures suites/full.yaml, every case (FULL_KERNELS narrows it), at
#      FULL_ROUNDS rounds a side (default 2, no extension), --time-identical. Each round
#      is a process, so fewer rounds keep the ratio of per-process start-up to
#      measuring as it is at 6 rounds. If the 1-GPU run is cut by the time left, the
#      summary gives the ratio as a bound ("b_wall_ratio_at_most").
# On a host of 4 or more GPUs the phases run in two lanes at once, on GPUs of their own
# (CUDA_VISIBLE_DEVICES, which --gpus counts within): GPUs 0,1 take b-2gpu, a-2gpu, c
# and GPU 2 takes b-1gpu, a-1gpu, after a warm-up that builds the CUDA extension and
# compiles every kernel of both suites once (so no timed phase pays a cold compile);
# then, in the time left, a and b with --gpus 4 on all four. A lane's wall times are
# its own (its own GPUs; 64 host cores). On 2 or 3 GPUs the phases run one by one.
# Works on a CPU too (DEVICE=cpu: a tiny check of the script, no GPU numbers).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH
mkdir -p "$OUT/shard-logs"
DEVICE=${DEVICE:-cuda}
SUITE=${SUITE:-suites/default.yaml}
FULL_SUITE=${FULL_SUITE:-suites/full.yaml}
FULL_ROUNDS=${FULL_ROUNDS:-2}
FULL_KERNELS=${FULL_KERNELS:-}
PHASE_LIMIT=${PHASE_LIMIT:-300}
TOTAL_LIMIT=${TOTAL_LIMIT:-570}
GPU_SPLIT=${GPU_SPLIT:-rounds}  # --gpu-split: the rounds dealt over the GPUs, or the cases
START=$SECONDS
SKIP=${SKIP:-}
LOGS=$OUT/shard-logs
RECORDS=$LOGS/records.jsonl
: > "$RECORDS"
if [ "$DEVICE" = cuda ]; then
  export GPU_LABEL=${GPU_LABEL:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)}
  nvidia-smi --query-gpu=index,name,clocks.max.sm --format=csv > "$LOGS/gpus.csv" 2>&1
fi
OVERLAP_OFF='s/(64, True): (1024 \* 1024, "simple-overlap"/(64, True): (1024 * 1024, "simple"/'

pr_tree() {  # name, then optionally a sed expression for kernels/flash_plan.py
  local dir=/tmp/shard-pr-$1
  rm -rf "$dir" && mkdir -p "$dir" && cp -r kernels suites "$dir/"
  if [ -n "${2:-}" ]; then
    sed -i "$2" "$dir/kernels/flash_plan.py"
    cmp -s "$dir/kernels/flash_plan.py" kernels/flash_plan.py && echo "plant did not apply: $2" >&2
  fi
  echo "$dir"
}

check() {  # phase name, gpus, tree, extra guard.ci args... (LANE: CUDA_VISIBLE_DEVICES)
  local name=$1 gpus=$2 tree=$3; shift 3
  local t0 t1 rc limit
  limit=$(( TOTAL_LIMIT - (SECONDS - START) - 15 ))
  (( limit > PHASE_LIMIT )) && limit=$PHASE_LIMIT
  if (( limit < 20 )); then echo "=== $name: skipped (no time left)"; return; fi
  t0=$(date +%s.%N)
  env ${LANE:+CUDA_VISIBLE_DEVICES=$LANE} TESTED_SHA="$name" timeout "$limit" python3 -m guard.ci --device "$DEVICE" --base judge \
    --candidate-tree "$tree" --out-dir "$LOGS/$name" --gpus "$gpus" --gpu-split "$GPU_SPLIT" "$@" \
    > "$LOGS/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  python3 - "$name" "$gpus" "$rc" "$t0" "$t1" "$LOGS/$name/meta.json" "$limit" >> "$RECORDS" <<'PY'
import json, os, sys
name, gpus, rc, t0, t1, meta, limit = sys.argv[1:]
rec = {"phase": name, "gpus": int(gpus), "exit": int(rc), "wall_s": float(t1) - float(t0),
       "limit_s": int(limit), "cut": int(rc) in (124, 137),
       "lane": os.environ.get("LANE") or "all"}
if os.path.isfile(meta):
    o = json.load(open(meta))
    rec["headline"] = o["headline"]
    rec["verdicts"] = {c["id"]: c["verdict"] for c in o["cases"]}
    rec["ratios"] = {c["id"]: c["ratio"] for c in o["cases"] if c["gate"]}
    # Where a round's time went (the guard's own note, over every shard's rounds).
    rec["phases_notes"] = [n for n in o.get("notes", []) if n.startswith("worker time per round")]
print(json.dumps(rec))
PY
  echo "=== $name (--gpus $gpus): exit $rc in $(python3 -c "print(round($t1 - $t0))") s"
  grep -E "^\[perf-guard\] (FAIL|PASS|NO VERDICT|ERROR|BAD)" "$LOGS/$name.log" | tail -n 1
}

skip() { [[ " $SKIP " == *" $1 "* ]]; }

full_suite() {  # suites/full-proof.yaml: the full suite at FULL_ROUNDS rounds a side
  sed -E "s/^  rounds: [0-9]+/  rounds: $FULL_ROUNDS/; s/^  max_rounds: [0-9]+/  max_rounds: $FULL_ROUNDS/" \
    "$FULL_SUITE" > suites/full-proof.yaml
  only=()
  [ -n "$FULL_KERNELS" ] && read -r -a names <<< "$FULL_KERNELS" && only=(--kernels "${names[@]}")
}
phase_c() { skip c || check c-plant-2gpu 2 "$(pr_tree plant "$OVERLAP_OFF")" --suite "$SUITE"; }
phase_a() { skip a || check "a-${1}gpu" "$1" "$SAME_TREE" --suite "$SUITE" --time-identical; }
phase_b() {
  skip b || check "b-${1}gpu" "$1" "$FULL_TREE" --suite suites/full-proof.yaml --time-identical "${only[@]}"
}

full_suite
SAME_TREE=$(pr_tree same)
FULL_TREE=$(pr_tree full)
gpu_count=0
[ "$DEVICE" = cuda ] && gpu_count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if (( gpu_count >= 4 )); then
  echo "=== warm-up: the CUDA extension and every kernel of both suites compiled once"
  t0=$SECONDS
  warm() {  # GPU, name, suite, kernels...: a check compiles what it runs
    local gpu=$1 name=$2 suite=$3; shift 3
    CUDA_VISIBLE_DEVICES=$gpu timeout 200 python3 -m guard check --device cuda --suite "$suite" -q \
      --rounds 1 --max-rounds 1 --kernels "$@" --out "$LOGS/warm-$name.json" > "$LOGS/warm-$name.log" 2>&1
    echo "    warm-up $name: exit $?"
  }
  warm 0 default "$SUITE" triton_flash gluon_flash cuda_flash flash_attention &
  skip b || warm 1 full-triton suites/full-proof.yaml triton_flash &
  skip b || warm 2 full-gluon suites/full-proof.yaml gluon_flash flash_attention &
  skip b || warm 3 full-cuda suites/full-proof.yaml cuda_flash &
  # The compiler-resource notes' compiles (CPU only, cached by source), as a runner
  # that has run the check before holds them.
  suites=("$SUITE")
  skip b || suites+=(suites/full-proof.yaml)
  for s in "${suites[@]}"; do
    timeout 300 python3 -m guard.measure.resources --suite "$s" --arch sm_90 \
      --out "$LOGS/warm-resources-$(basename "$s" .yaml).json" > /dev/null 2>&1 &
  done
  wait
  echo "    $((SECONDS - t0)) s"
  lane() { export LANE=$1; shift; for p in "$@"; do $p; done; }  # GPUs, then phase calls
  lane 0,1 "phase_b 2" "phase_a 2" phase_c > "$LOGS/lane-2gpu.txt" 2>&1 &
  lane 2 "phase_b 1" "phase_a 1" > "$LOGS/lane-1gpu.txt" 2>&1 &
  wait
  cat "$LOGS/lane-2gpu.txt" "$LOGS/lane-1gpu.txt"
  # FOUR=0: GPU 3 stays free for other work of the same call.
  [ "${FOUR:-1}" = 1 ] && lane 0,1,2,3 "phase_b 4" "phase_a 4"
  LANE=
else
  phase_b 2
  phase_b 1
  phase_a 1
  phase_a 2
  phase_c
fi
rm -f suites/full-proof.yaml

python3 - "$RECORDS" "$OUT/shard-proof.json" "$FULL_ROUNDS" "$FULL_KERNELS" "$GPU_SPLIT" <<'PY'
import json, sys
records = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
by = {r["phase"]: r for r in records}
summary = {"records": records, "full_rounds": int(sys.argv[3]),
           "full_kernels": sys.argv[4].split() or "all", "gpu_split": sys.argv[5]}
a1, a2 = by.get("a-1gpu"), by.get("a-2gpu")
if a1 and a2 and "verdicts" in a1 and "verdicts" in a2:
    differ = sorted(k for k in a1["verdicts"] if a1["verdicts"][k] != a2["verdicts"].get(k))
    summary["a_same_check_verdict"] = a1["exit"] == a2["exit"]
    summary["a_case_verdicts_differ"] = differ
    summary["a_wall_ratio"] = a2["wall_s"] / a1["wall_s"]
c = by.get("c-plant-2gpu")
if c:
    summary["c_plant_caught"] = c["exit"] == 1
    summary["c_regressed"] = sorted(k for k, v in c.get("verdicts", {}).items() if v == "regression")
b1, b2 = by.get("b-1gpu"), by.get("b-2gpu")
if b1 and b2 and not b2["cut"]:
    ratio = b2["wall_s"] / b1["wall_s"]
    if b1["cut"]:  # one GPU took longer than it was allowed: the ratio is at most this
        summary["b_wall_ratio_at_most"] = ratio
    else:
        summary["b_wall_ratio"] = ratio
        summary["b_same_check_verdict"] = b1["exit"] == b2["exit"]
        differ = sorted(k for k in b1.get("verdicts", {})
                        if b1["verdicts"][k] != b2.get("verdicts", {}).get(k))
        summary["b_case_verdicts_differ"] = differ
    summary["b_within_0_6"] = ratio <= 0.6
json.dump(summary, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: v for k, v in summary.items() if k != "records"}, indent=1))
PY
tar -C "$OUT" -czf "$OUT/shard-logs.tgz" shard-logs && rm -rf "$LOGS"
python3 benchmarks/shard_plot.py "$OUT/shard-proof.json" "$OUT/shard-scaling.svg" || true
