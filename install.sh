#!/usr/bin/env bash
# Install this project on this machine: `./install.sh` for the guard and kernels,
# `./install.sh --test` for the test tools too. Keeps a CUDA build of torch when one
# is installed (GPU machines); otherwise installs the CPU build, torch==2.13.0.
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if "$py" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
  echo "install: keeping the CUDA build of torch that is installed"
else
  # numpy<2.4: triton 3.6's interpreter (the CPU tests) converts 1-element arrays with
  # int(), which numpy 2.4 refuses; GPU runners never interpret, so they keep theirs.
  "$py" -m pip install -q "torch==2.13.0" "numpy<2.4"
fi
extras=triton
[ "${1:-}" = "--test" ] && extras=triton,test
"$py" -m pip install -q -e ".[$extras]"

if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  # The HTML report test renders in headless Chromium (skipped when it is missing).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install: chromium not installed (needs root and apt); its test will be skipped"
  fi
fi
