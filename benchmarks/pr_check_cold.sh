#!/usr/bin/env bash
# The PR check as a fresh GPU runner runs it: a judge checkout (git) of this tree, each
# "PR" a clone of it with one commit on top, and no compile cache but the trusted one
# that main's trusted jobs build (`guard warm-cache`). Phases by name, in order given:
#   warm   build the trusted cache from the judge, as the nightly job on main does
#   docs   a PR that changes README.md only (kernels/ is the same git tree)
#   same   a PR with no change at all
#   touch  a PR that edits kernels/ without changing a compiled kernel or launch
#          (a comment in kernels/flash_plan.py): probed, checked, nothing timed
#   timed  a PR with no change at all, every gated case timed anyway (--time-identical)
#   decode a real regression of the split-KV decode kernel: its head_dim-128 config back
#          to 64-key tiles in 4 stages (1.06x at 4x32x8 heads, one query, 32768 keys;
#          about 1.01x at 4096 keys, where measured)
#   plant  a real regression: FlashAttention-4's lazy O rescale off in the Gluon kernel's
#          head_dim-128 non-causal tier (from 4096^2 and 1024 row blocks), so only
#          gluon_flash cases at S >= 4096 change (1-3% slower where measured)
# Each phase's exit code, wall time, the check's progress lines and every case that was
# not identical go to stdout; logs and outcomes to $OUT/<phase>*. PHASE_LIMIT (seconds,
# default 590) bounds each guard process; COLD (default /tmp/cold) holds the trees;
# WARM_ARGS are passed to `guard warm-cache` (e.g. --no-resources), CHECK_ARGS to every
# check (e.g. --kernels triton_flash, with the same in WARM_ARGS).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH
DEVICE=${DEVICE:-cuda}
COLD=${COLD:-/tmp/cold}
JUDGE=$COLD/judge
TRUSTED=$COLD/trusted
export GIT_AUTHOR_NAME=proof GIT_AUTHOR_EMAIL=proof@localhost
export GIT_COMMITTER_NAME=proof GIT_COMMITTER_EMAIL=proof@localhost
# Nothing compiled before: every build lands in the trusted cache or a tree's copy of it.
export ATTN_GUARD_CACHE=$COLD/untrusted/attn-guard TRITON_CACHE_DIR=$COLD/untrusted/triton

judge() {  # the judge: this tree as a one-commit git repository
  [ -d "$JUDGE/.git" ] && return
  mkdir -p "$JUDGE"
  tar --exclude=./.git --exclude=./gpu-out --exclude=./.whl -cf - . | tar -C "$JUDGE" -xf -
  (cd "$JUDGE" && git init -q && git add -A && git commit -qm base)
}

pr() {  # name, then optionally a sed expression and the file it edits
  local dir=$COLD/pr-$1
  rm -rf "$dir"
  git clone -q "$JUDGE" "$dir"
  if [ -n "${2:-}" ]; then
    sed -i "$2" "$dir/$3"
    (cd "$dir" && git diff --quiet && echo "plant did not apply: $2" >&2)
    (cd "$dir" && git commit -qam "$1")
  fi
  echo "$dir"
}

check() {  # phase, tree, then any further arguments of guard.ci
  local phase=$1 tree=$2 t0=$SECONDS
  shift 2
  (cd "$JUDGE" && PYTHONPATH=$JUDGE TESTED_SHA=$phase timeout "${PHASE_LIMIT:-590}" \
    python3 -m guard.ci --device "$DEVICE" --base "$(git -C "$JUDGE" rev-parse HEAD)" \
    --candidate-tree "$tree" --trusted-cache "$TRUSTED" --out-dir "$OUT/$phase" "$@" ${CHECK_ARGS:-} \
    > "$OUT/$phase.log" 2>&1)
  local rc=$?
  echo "=== $phase: exit $rc in $((SECONDS - t0)) s"
  grep -E "^\[perf-guard\]" "$OUT/$phase.log" | grep -vE ": [0-9]+ case\(s\)$" | cut -c1-200
  [ -f "$OUT/$phase/meta.json" ] || { tail -n 5 "$OUT/$phase.log"; return; }
  python3 - "$OUT/$phase/meta.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
for note in o["notes"]:
    if note.startswith(("surface", "kernels/", "coverage", "sandbox")):
        print(" ", note[:300])
for c in o["cases"]:
    if c["verdict"] not in ("identical", "control"):
        r = c["ratio"]
        ci = f" [{c['low']:.3f}, {c['high']:.3f}]" if c.get("low") else ""
        print(f"  {c['id']:<48} {c['verdict']:<12} {'' if r is None else f'{r:.3f}x'}{ci}")
keys = ("start_s", "imports_s", "load_s", "check_s", "prepare_s", "warm_s", "sample_s",
        "verify_s", "exit_s", "total_s")
for name in ("base-results.json", "results.json"):  # where each worker's time went
    try:
        rounds = json.load(open(sys.argv[1].replace("meta.json", name)))["rounds"]
    except (OSError, KeyError):
        continue
    for info in rounds:
        ph = info.get("phases") or {}
        cells = " ".join(f"{k[:-2]} {ph.get(k, 0):.1f}" for k in keys)
        print(f"  {name[:4]} round {info['index']:>2} {info['duration_s']:5.1f} s: {cells}")
PY
}

TOUCH='s/^# The chooser$/# The chooser (the one path chooser)/'
PLANT='s/Tier(4096 \* 4096, 1024, "ws-persistent", {"SPLIT_KEYS": 1})/Tier(4096 * 4096, 1024, "ws-persistent", {"SPLIT_KEYS": 1, "LAZY_RESCALE": 0})/'
DECODE='s/    128: triton_config(64, 128, 4, 3),/    128: triton_config(64, 64, 4, 4),/'
judge
for p in "$@"; do
  case $p in
    warm)
      t0=$SECONDS
      (cd "$JUDGE" && PYTHONPATH=$JUDGE timeout "${PHASE_LIMIT:-590}" \
        python3 -m guard warm-cache "$TRUSTED" --device "$DEVICE" ${WARM_ARGS:-} > "$OUT/warm.log" 2>&1)
      echo "=== warm: exit $? in $((SECONDS - t0)) s"
      tail -n 4 "$OUT/warm.log"
      du -sh "$TRUSTED"/* 2> /dev/null ;;
    docs)
      tree=$(pr docs)
      echo "a line" >> "$tree/README.md" && (cd "$tree" && git commit -qam docs)
      check docs "$tree" ;;
    same) check same "$(pr same)" ;;
    timed) check timed "$(pr timed)" --time-identical ;;
    decode) check decode "$(pr decode "$DECODE" kernels/flash_plan.py)" ;;
    touch) check touch "$(pr touch "$TOUCH" kernels/flash_plan.py)" ;;
    plant) check plant "$(pr plant "$PLANT" kernels/flash_plan.py)" ;;
    *) echo "unknown phase $p" ;;
  esac
done
