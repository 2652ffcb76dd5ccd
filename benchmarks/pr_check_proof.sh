#!/usr/bin/env bash
# The PR check as the workflow runs it, on a GPU: this checkout is the judge (the base
# commit); each "PR" is a copy of it with one change, passed as --candidate-tree.
# Phases by name (each bounded by PHASE_LIMIT; benchmarks/README.md lists them; the PR
# trees are plain copies with no trusted cache, so CUDA cases can be timed even in "same":
# pr_check_cold.sh runs the check as CI does):
#   same      an unchanged tree (identical kernels: decided without timing)
#   timed     the unchanged tree, gated kernels timed anyway (--time-identical)
#   gluon-off the H200 dispatch table naming the Triton kernel at every shape: only the
#             ungated flash_attention control moves (reported, never failing)
#   overlap-off a planted regression: FASTER's hd-64 causal Gluon variant back to the plain
#             one-warpgroup kernel (no intra-warpgroup overlap), below the causal tier of 256
#             row blocks (gluon_flash's (1, 8, 512, 64): 1.083x on an H200)
#   ws-off    a planted regression in the portable Triton kernel (its warp-specialized
#             TMA path off)
#   cuda-overlap-off a planted regression in the CUDA C++ kernel's Hopper path: its
#             intra-warpgroup overlap off (each Q K^T waited for before the softmax)
#   cuda-prefetch-off the CUDA C++ kernel's Hopper path without its L2 prefetch of the next
#             tile's Q (only head_dim 128's 192-key tiles have it). It pays only where Q
#             comes from DRAM; in the guard's back-to-back samples the suite's inputs stay
#             in L2, so this passes (measured 1.004x at (2, 8, 2048, 128) non-causal)
#   ws-bursts the same PR measured in "bursts" (synchronized 1 ms samples, GPU idles)
#   refresh   baseline refresh of this GPU under the current plan
#   against   `guard compare --against` as a developer runs it: a git repository of this
#             tree with the overlap-off plant committed on top, compared with its parent
#             (paired, interleaved), then the parent against itself (identical kernels)
#   local-base `python -m guard.ci --base HEAD~1` in that repository (no --candidate-tree:
#             the policy from the base commit as text), as a developer runs the check
#   rig-namespace a rigged PR: the overlap-off plant with kernels/__init__.py deleted (a
#             namespace package the judge's own kernels would shadow): must not pass
#   rig-daemon a rigged PR whose kernels/ starts a daemon (double fork, setsid) at import:
#             must fail, and nothing of it may outlive the check
# Exit code, verdicts per case and wall time of each go to $OUT/<phase>.* and a line each;
# PHASE_LIMIT (seconds, default 590) bounds each guard process.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH
export GPU_LABEL=${GPU_LABEL:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)}

pr_tree() {  # name, then optionally a sed expression and the file under kernels/ it edits
  local dir=/tmp/pr-$1
  rm -rf "$dir" && mkdir -p "$dir"
  cp -r kernels "$dir/"
  if [ -n "${2:-}" ]; then
    local file=$dir/kernels/${3:-flash_attention.py}
    sed -i "$2" "$file"
    cmp -s "$file" "kernels/${3:-flash_attention.py}" && echo "plant did not apply: $2" >&2
  fi
  echo "$dir"
}

check() {  # phase, tree, extra guard.ci args...
  local phase=$1 tree=$2; shift 2
  local t0=$SECONDS
  TESTED_SHA=$phase timeout "${PHASE_LIMIT:-590}" python3 -m guard.ci --device cuda --base judge \
    --candidate-tree "$tree" --out-dir "$OUT/$phase" "$@" > "$OUT/$phase.log" 2>&1
  local rc=$?
  echo "=== $phase: exit $rc in $((SECONDS - t0)) s"
  [ -f "$OUT/$phase/meta.json" ] || { tail -n 5 "$OUT/$phase.log"; return; }
  python3 - "$OUT/$phase/meta.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
print(" ", o["headline"])
for c in o["cases"]:
    if c["gate"] or c["verdict"] not in ("identical", "control"):
        r = c["ratio"]
        ci = f" [{c['low']:.3f}, {c['high']:.3f}]" if c.get("low") else ""
        print(f"  {c['id']:<40} {c['verdict']:<12} {'' if r is None else f'{r:.3f}x'}{ci}")
PY
}

plant_repo() {  # a git repository of this tree, the overlap-off plant committed on top
  repo=/tmp/against-repo
  rm -rf "$repo" && mkdir -p "$repo"
  tar --exclude=./.git --exclude=./gpu-out -cf - . | tar -C "$repo" -xf -
  (cd "$repo" && export GIT_AUTHOR_NAME=proof GIT_AUTHOR_EMAIL=proof@localhost \
      GIT_COMMITTER_NAME=proof GIT_COMMITTER_EMAIL=proof@localhost \
    && git init -q && git add -A && git commit -qm base \
    && sed -i "$OVERLAP_OFF" kernels/flash_plan.py \
    && ! git diff --quiet && git commit -qam plant \
    && git diff --stat HEAD~1)
}

DAEMON='import os as _os
_pid = _os.fork()
if _pid == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.execvp("sleep", ["sleep", "777"])
    _os._exit(0)
_os.waitpid(_pid, 0)'

WS_OFF='s/and env.triton_ws$/and False/'
GLUON_OFF='s/"kernel": "gluon"/"kernel": "triton"/'
CUDA_OVERLAP_OFF='s/^constexpr bool kIntraWarpgroupOverlap = true;/constexpr bool kIntraWarpgroupOverlap = false;/'
CUDA_PREFETCH_OFF='s/^#define FLASH_SM90_PREFETCH_NEXT_Q 1$/#define FLASH_SM90_PREFETCH_NEXT_Q 0/'
OVERLAP_OFF='s/(64, True): (1024 \* 1024, "simple-overlap"/(64, True): (1024 * 1024, "simple"/'
for p in "$@"; do
  case $p in
    same) check same "$(pr_tree same)" ;;
    timed) check timed "$(pr_tree timed)" --time-identical --kernels triton_flash cuda_flash sdpa ;;
    gluon-off) check gluon-off "$(pr_tree gluon-off "$GLUON_OFF" dispatch/nvidia-h200.json)" --html ;;
    overlap-off) check overlap-off "$(pr_tree overlap-off "$OVERLAP_OFF" flash_plan.py)" ;;
    ws-off) check ws-off "$(pr_tree ws-off "$WS_OFF" flash_plan.py)" ;;
    cuda-overlap-off)
      check cuda-overlap-off "$(pr_tree cuda-overlap-off "$CUDA_OVERLAP_OFF" csrc/flash_fwd_sm90.cuh)" ;;
    cuda-prefetch-off)
      check cuda-prefetch-off "$(pr_tree cuda-prefetch-off "$CUDA_PREFETCH_OFF" csrc/flash_fwd_sm90.cuh)" ;;
    ws-bursts)
      sed 's/load: sustained/load: bursts/' suites/default.yaml > /tmp/bursts.yaml
      cp /tmp/bursts.yaml suites/bursts.yaml
      check ws-bursts "$(pr_tree ws-bursts "$WS_OFF" flash_plan.py)" --suite suites/bursts.yaml
      rm -f suites/bursts.yaml ;;
    refresh)
      t0=$SECONDS
      timeout "${PHASE_LIMIT:-590}" python3 -m guard baseline refresh --dir "$OUT" --markdown "$OUT/refresh.md" \
        > "$OUT/refresh.log" 2>&1
      echo "=== refresh: exit $? in $((SECONDS - t0)) s"; tail -3 "$OUT/refresh.log" ;;
    against)
      plant_repo || { echo "=== against: the plant did not apply"; continue; }
      for ref in HEAD~1 HEAD; do  # the plant against its parent, then against itself
        t0=$SECONDS name=against-$([ $ref = HEAD ] && echo self || echo plant)
        (cd "$repo" && PYTHONPATH=$repo timeout "${PHASE_LIMIT:-590}" python3 -m guard compare --device cuda \
          --against "$ref" --out "$OUT/$name/results.json" \
          --markdown "$OUT/$name.md" > "$OUT/$name.txt" 2> "$OUT/$name.log")
        echo "=== $name (--against $ref): exit $? in $((SECONDS - t0)) s"
        tail -n 24 "$OUT/$name.txt"
      done ;;
    local-base)
      [ -d /tmp/against-repo/.git ] || plant_repo > /dev/null || { echo "=== local-base: no plant"; continue; }
      t0=$SECONDS
      (cd /tmp/against-repo && PYTHONPATH=/tmp/against-repo timeout "${PHASE_LIMIT:-590}" \
        python3 -m guard.ci --device cuda --base HEAD~1 --out-dir "$OUT/local-base" \
        > "$OUT/local-base.log" 2>&1)
      echo "=== local-base (guard.ci --base HEAD~1): exit $? in $((SECONDS - t0)) s"
      grep -iE "resource|registers|PASS|FAIL|NO VERDICT|regression" "$OUT/local-base.log" | tail -n 12 ;;
    rig-namespace)
      tree=$(pr_tree rig-namespace "$OVERLAP_OFF" flash_plan.py)
      rm "$tree/kernels/__init__.py"
      check rig-namespace "$tree" ;;
    rig-daemon)
      tree=$(pr_tree rig-daemon)
      printf '%s\n' "$DAEMON" >> "$tree/kernels/__init__.py"
      check rig-daemon "$tree"
      left=$(pgrep -f 'sleep 777' | wc -l)
      echo "  processes of the PR still running after the check: $left"
      pkill -f 'sleep 777' ;;
    *) echo "unknown phase $p" ;;
  esac
done
