#!/usr/bin/env bash
# GPU work by named phase: environment, GPU correctness tests, kernel tuning tables,
# the Gluon benchmark, calibration pools and the guard itself. Each phase has its own
# time limit, so a few phases fit one run of a few minutes:
#   benchmarks/gpu_session.sh env tests tune guard
# Everything lands in $OUT (or ./gpu-out) with a log per phase. benchmarks/README.md
# lists the phases and what each writes.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"  # cd to the root, OUT, the offline wheels (.whl/), PYTHONPATH

phase() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date +%T))"
  local t0=$SECONDS
  timeout --signal=KILL "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- $name: exit $rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
  return $rc
}

for p in "$@"; do
  case $p in
    env)
      phase env 120 bash -c 'nvidia-smi; python3 -c "import torch, triton, scipy, numpy, jinja2, yaml; print(torch.__version__, torch.version.cuda, triton.__version__, scipy.__version__, numpy.__version__); print(torch.cuda.get_device_name(0))"; nvcc --version | tail -2' ;;
    tests)
      phase tests-triton 400 python3 -m pytest tests/test_triton_flash.py -m gpu -x -q -ra -p no:cacheprovider
      phase tests-cuda 400 python3 -m pytest tests/test_cuda_flash.py -m gpu -x -q -ra -p no:cacheprovider ;;
    faults)
      phase tests-faults 300 python3 -m pytest tests -m gpu -q -ra -p no:cacheprovider -k "fault or illegal" ;;
    tune)
      phase tune 420 python3 benchmarks/tune_triton.py --out "$OUT" ;;
    bench-cuda)
      SHOW_PTXAS=1 phase bench-cuda 300 python3 benchmarks/bench_cuda_flash.py ;;
    check)
      phase check 300 python3 -m guard check --out "$OUT/check.json" ;;
    guard)
      phase guard-run 540 python3 -m guard run --out "$OUT/run.json" --markdown "$OUT/run.md" ;;
    refresh)
      [ -n "${GATE_FAILED:-}" ] && { echo "refresh skipped: the dispatch failed its checks"; continue; }
      phase refresh 540 python3 -m guard baseline refresh --dir "$OUT" --markdown "$OUT/refresh.md" ;;
    compare)
      phase compare 540 python3 -m guard compare --baselines baselines --out "$OUT/compare.json" --markdown "$OUT/compare.md" --html "$OUT/compare.html" ;;
    gluon)  # the Gluon kernel against SDPA and the portable kernel (docs/PERFORMANCE.md)
      TAIL=45 phase gluon "$(( ${GLUON_BUDGET:-220} + 20 ))" python3 benchmarks/bench_gluon.py \
        --out "$OUT" --budget-s "${GLUON_BUDGET:-220}" --providers "${GLUON_PROVIDERS:-sdpa,triton,triton-portable,triton+gluon,gluon-ws,gluon-ws-persistent,gluon-simple,gluon-simple-overlap:hd=64,gluon-simple-overlap:BLOCK_N=64:hd=64}" \
        --unchecked "${GLUON_UNCHECKED:-triton-portable}" \
        --paired "${GLUON_PAIRED-sdpa,triton,triton-portable,gluon-simple:BLOCK_N=64:hd=64}" ;;
    gluon-gate)  # exit 1 when a check of the dispatched kernel failed in the gluon phase
      phase gluon-gate 30 python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; mine=[r for r in rows if r.get("name") in ("triton","triton+gluon")]; bad=[r for r in mine if not r.get("ok") or r.get("error")]; n=sum(r.get("kind")=="check" for r in mine); print(f"{len(mine)-len(bad)}/{len(mine)} checks and timed-output checks of the dispatch pass ({n} checks)"); sys.exit(1 if bad or not n else 0)' "$OUT/results.jsonl" || GATE_FAILED=1 ;;
    gluon-headline)  # the entry point against cuDNN on the table's and the headline shapes, side by side, and eager µs per call
      TAIL=45 phase gluon-headline 300 python3 benchmarks/bench_gluon.py --out "$OUT/gluon-headline" \
        --shapes all --providers sdpa,triton --paired sdpa,triton --rounds "${GLUON_ROUNDS:-6}" --budget-s 280 ;;
    split)  # runs of key tiles: the cut shapes against the reference, then the CTAs' timeline
      phase split-tests 200 python3 -m pytest tests/test_gluon_split.py -q -ra -p no:cacheprovider
      phase split-trace 150 python3 benchmarks/trace_persistent.py --out "$OUT/trace" ;;
    ncu-gluon)
      phase ncu-gluon 150 python3 benchmarks/ncu_gluon.py --out "$OUT" --budget-s 60 ;;
    ncu-pipes)  # which pipe each kernel waits on: the entry point beside cuDNN (about 30 s)
      phase ncu-pipes 200 python3 benchmarks/ncu_pipes.py --out "$OUT" ;;
    pack)  # all but the baselines in one tarball, for a runner that returns few files
      (cd "$OUT" && tar czf /tmp/session.tgz --exclude='./nvidia-*.json' . \
        && find . -type f ! -name 'nvidia-*.json' -delete \
        && find . -mindepth 1 -type d -empty -delete; mv /tmp/session.tgz .) ;;
    calibrate)
      phase calibrate "${CAL_LIMIT:-560}" python3 benchmarks/calibrate.py collect --out "$OUT" --seconds "${CAL_SECONDS:-500}" ;;
    *) echo "unknown phase $p" ;;
  esac
done
