#!/usr/bin/env bash
# A project's own pytest-benchmark suite, decided paired (docs/PYTEST.md), end to end.
# Each example is copied into a fresh git repository and committed (HEAD: the
# baseline), then compared with its working tree by
#   guard compare --against HEAD --pytest . <pytest-benchmark options>
#   unchanged: nothing edited                      -> exit 0, every case "unchanged"
#   planted:   SLOWDOWN = 1.1 (10% more work in one function) -> exit 1, that case
#              "regression", the other not
# Parts (PARTS, default "gpu cpu"): gpu = examples/pytest_benchmark_gpu (torch matmul,
# --device cuda; skipped without CUDA), cpu = examples/pytest_benchmark_demo (pure
# Python). SCENARIOS (default "unchanged planted") picks the runs of each part;
# THRESHOLD (e.g. min:5%) is passed as --threshold.
# From the repository root:
#   PYTHONPATH=. OUT=/tmp/proof bash benchmarks/pytest_gpu_proof.sh
# Prints one line per run (exit code, wall time, each case's verdict and ratio) and
# writes $OUT/summary.txt and each run's outcome JSON ($OUT/<part>-<scenario>.json).
# Exit 0 when every run ended as wanted, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
ROOT=$PWD
OUT=${OUT:-$PWD/pytest-proof-out}
mkdir -p "$OUT"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PARTS=${PARTS:-gpu cpu}
SCENARIOS=${SCENARIOS:-unchanged planted}
THRESHOLD=${THRESHOLD:-}  # e.g. min:5% (each round its fastest sample); default median:5%
ROUNDS=${ROUNDS:-6}
# The ceiling: 8 rounds a tree (to bound GPU time), 40 under min:N% (the guard's default there).
case "$THRESHOLD" in min:*) MAX_ROUNDS=${MAX_ROUNDS:-40} ;; *) MAX_ROUNDS=${MAX_ROUNDS:-8} ;; esac
LIMIT=${LIMIT:-$((60 + MAX_ROUNDS * 25))}  # seconds per guard run: a round a tree is 5-14 s
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
status=0

say() { echo "$*" | tee -a "$SUMMARY"; }

project() {  # part example: a fresh repository holding the example, committed
  local dir=$WORK/$1
  cp -r "$ROOT/examples/$2" "$dir"
  rm -rf "$dir/__pycache__" "$dir/.benchmarks"
  git -C "$dir" init -q &&
    git -C "$dir" add . &&
    git -C "$dir" -c user.name=proof -c user.email=proof@example.com commit -qm example
}

verdicts() {  # outcome JSON -> "headline | case: verdict ratio [ci]; ..."
  python3 - "$1" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("no outcome JSON"); sys.exit()
cases = []
for c in doc.get("cases", []):
    ci = c.get("ci")
    ratio = f"{c['ratio']:.3f}x" if c.get("ratio") else "-"
    span = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    name = c["id"].rsplit("::", 1)[-1]
    cases.append(f"{name}: {c.get('case_verdict') or c.get('status')} {ratio}{span}")
print(doc.get("headline", "?"), "|", "; ".join(cases))
PY
}

run() {  # part scenario want device pytest-args...
  local part=$1 scenario=$2 want=$3 device=$4
  shift 4
  local t0=$SECONDS
  (cd "$WORK/$part" && timeout --signal=KILL "$LIMIT" python3 -m guard compare \
    --against HEAD --device "$device" --rounds "$ROUNDS" --max-rounds "$MAX_ROUNDS" -q --json \
    --out "$WORK/$part-$scenario-results.json" ${THRESHOLD:+--threshold "$THRESHOLD"} \
    --pytest . "$@") \
    > "$OUT/$part-$scenario.json" 2> "$WORK/$part-$scenario.log"
  local rc=$?
  cp "$WORK/$part-$scenario-results.json" "$OUT/" 2>/dev/null  # the rounds, for a second look
  say "$part $scenario: exit $rc (want $want) in $((SECONDS - t0)) s; $(verdicts "$OUT/$part-$scenario.json")"
  if [ "$rc" -ne "$want" ]; then
    status=1
    tail -n 15 "$WORK/$part-$scenario.log" | tee -a "$SUMMARY"
  fi
}

plant() {  # part file: SLOWDOWN = 1.0 -> 1.1 in the working tree
  sed -i 's/^SLOWDOWN = 1\.0$/SLOWDOWN = 1.1/' "$WORK/$1/$2"
  grep -q '^SLOWDOWN = 1.1$' "$WORK/$1/$2" || { say "$1: cannot plant in $2"; status=1; }
}

part() {  # name example device source pytest-args...
  local name=$1 example=$2 device=$3 source=$4
  shift 4
  project "$name" "$example" || { say "$name: cannot make its repository"; status=1; return; }
  [[ " $SCENARIOS " == *" unchanged "* ]] && run "$name" unchanged 0 "$device" "$@"
  if [[ " $SCENARIOS " == *" planted "* ]]; then
    plant "$name" "$source"
    run "$name" planted 1 "$device" "$@"
  fi
}

say "pytest-benchmark paired proof: $(date -u +%FT%TZ), host $(hostname), rounds $ROUNDS (max $MAX_ROUNDS), threshold ${THRESHOLD:-median:5%}"
if ! python3 -c 'import pytest_benchmark' 2>/dev/null; then
  say "pytest-benchmark is not installed here (pip install pytest-benchmark)"
  exit 3
fi
say "$(python3 -c 'import pytest, pytest_benchmark; print("pytest", pytest.__version__, "pytest-benchmark", pytest_benchmark.__version__)')"
for p in $PARTS; do
  case $p in
    gpu)
      if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        say "gpu: $(python3 -c 'import torch; print(torch.cuda.get_device_name(0), torch.__version__)')"
        part gpu pytest_benchmark_gpu cuda matmul_demo.py \
          --benchmark-min-rounds=200 --benchmark-max-time=1.0 --benchmark-warmup=on \
          --benchmark-warmup-iterations=500 --benchmark-disable-gc
      else
        say "gpu: skipped (torch sees no CUDA device)"
      fi ;;
    cpu)
      part cpu pytest_benchmark_demo cpu checksum_demo.py \
        --benchmark-min-rounds=1000 --benchmark-max-time=0.5 --benchmark-disable-gc ;;
    *) say "unknown part $p"; status=1 ;;
  esac
done
say "overall: $([ $status -eq 0 ] && echo as wanted || echo NOT as wanted)"
exit $status
