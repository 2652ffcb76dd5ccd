#!/usr/bin/env bash
# The published history from real GPU runs, and the README's screenshot of one page.
#
#   benchmarks/history_site.sh measure   GPU: RUNS (default 3) fresh `guard run`s of this
#                                        tree here, as $OUT/history-run-<HHMM>-<i>.json
#   benchmarks/history_site.sh site      CPU: a history from every committed baseline
#                                        (each a refresh of main on an H100 or H200), the
#                                        real runs under docs/data/*/ (guard-run-*.json.gz,
#                                        history-run-*.json) and $OUT's, then `guard
#                                        publish` and a headless-Chromium screenshot
#
# In a copy of the tree whose .git is missing or stale, give the tree's commit:
# GUARD_COMMIT=<sha> (the runs then record it instead of asking git).
# UPDATE_DOCS=1 copies the screenshot to docs/history.png.
set -euo pipefail

OUT=${OUT:-./gpu-out/history}
RUNS=${RUNS:-3}
KERNELS=${KERNELS:-triton_flash gluon_flash cuda_flash}
DEVICE=${DEVICE:-cuda} # DEVICE=cpu KERNELS=sdpa tries the phase out without a GPU
CASE=${CASE:-triton_flash/b2-h8-s2048-d128-full}
REPO_URL=${REPO_URL:-https://github.com/attn-guard/attn-guard}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
mkdir -p "$OUT"

measure() {
  local stamp i code
  stamp=$(date -u +%H%M)
  for ((i = 1; i <= RUNS; i++)); do
    code=0
    # shellcheck disable=SC2086  # KERNELS is a list of names
    if [[ -n "${GUARD_COMMIT:-}" ]]; then
      GIT_DIR=/nonexistent GUARD_COMMIT="$GUARD_COMMIT" python3 -m guard run --device "$DEVICE" \
        --kernels $KERNELS --out "$OUT/history-run-$stamp-$i.json" -q || code=$?
    else
      python3 -m guard run --device "$DEVICE" --kernels $KERNELS \
        --out "$OUT/history-run-$stamp-$i.json" -q || code=$?
    fi
    echo "run $i of $RUNS: exit $code -> $OUT/history-run-$stamp-$i.json"
  done
}

site() {
  local extra=() f page
  shopt -s nullglob
  for f in docs/data/*/guard-run-*.json.gz docs/data/*/history-run-*.json "$OUT"/history-run-*.json; do
    extra+=(--extra "$f")
  done
  rm -f "$OUT/history.sqlite"
  python3 benchmarks/history_from_baselines.py --db "$OUT/history.sqlite" "${extra[@]}"
  rm -rf "$OUT/site"
  python3 -m guard publish --db "$OUT/history.sqlite" --out "$OUT/site" --all \
    --repo-url "$REPO_URL" --title "attn-guard: performance history of main"
  page=$(python3 -c 'import sys; from guard.report import site; print(site.page_name(sys.argv[1]))' "$CASE")
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --user-data-dir="$OUT/chromium-profile" --hide-scrollbars --window-size=1100,1040 \
    --screenshot="$OUT/history.png" "file://$(realpath "$OUT/site/cases/$page")" 2> /dev/null
  echo "site: $OUT/site/index.html; screenshot of $CASE: $OUT/history.png"
  if [[ -n "${UPDATE_DOCS:-}" ]]; then
    cp "$OUT/history.png" docs/history.png
  fi
}

case "${1:-}" in
  measure) measure ;;
  site) site ;;
  *) echo "usage: $0 measure|site" >&2; exit 2 ;;
esac
