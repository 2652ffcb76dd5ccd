#!/usr/bin/env bash
# Install the checkout this script belongs to (its root on the environment's path, as
# an editable install would put it, whatever the current directory) on a self-hosted GPU
# runner, in a fresh virtual environment that sees the runner's preinstalled CUDA build
# of torch. Every package it installs is pinned with its hashes
# (ci/requirements/runner.txt, pip's --require-hashes, --no-deps): nothing unpinned is
# downloaded, and pip itself is not upgraded. The PR check runs the
# *judge's* copy, `bash judge/ci/setup-runner.sh`, so a PR can change neither what is
# installed nor how: the commit under test (pr/) is never installed or built by pip.
#
# Never installs torch: the runner's CUDA torch is pinned with a constraint, so pip
# can neither replace it with a CPU wheel from PyPI nor upgrade it. Fails (exit 3,
# the guard's "infrastructure" code) when the runner has no CUDA torch or no GPU.
#
# The new environment sees the runner interpreter's site-packages through a .pth file
# rather than `venv --system-site-packages`, which would see only the *base*
# interpreter's packages when the runner's python is itself a venv or conda env.
#
# Env: PERF_GUARD_PYTHON    interpreter that has the CUDA torch (default: python3)
#      PERF_GUARD_VENV      where to create the environment
#                           (default: $RUNNER_TEMP/perf-guard-venv)
#      PERF_GUARD_PIP_ARGS  extra pip install arguments, e.g. for a runner without
#                           internet: "--no-index --no-build-isolation"
#      PERF_GUARD_ALLOW_CPU_TORCH=1  accept a CPU torch (only to test this script)
#      GITHUB_PATH          when set, the environment's bin/ is added for later steps
#      GITHUB_ENV           when set, later steps get per-job compile caches (the end)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py="${PERF_GUARD_PYTHON:-python3}"
venv="${PERF_GUARD_VENV:-${RUNNER_TEMP:-/tmp}/perf-guard-venv}"
read -r -a pip_args <<< "${PERF_GUARD_PIP_ARGS:-}"

torch_version=$("$py" - <<'PY'
import os
import sys
try:
    import torch
except ImportError as exc:
    sys.exit(f"no torch on the runner ({exc}); install the CUDA build of torch there first")
if torch.version.cuda is None and os.environ.get("PERF_GUARD_ALLOW_CPU_TORCH") != "1":
    sys.exit(f"torch {torch.__version__} on the runner is a CPU-only build; a GPU runner needs the CUDA build")
print(torch.__version__)
PY
) || exit 3

rm -rf "$venv"
"$py" -m venv "$venv"
# Make the runner's packages (torch first of all) visible inside the environment.
site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$py" - > "$site_dir/_perf_guard_runner_site.pth" <<'PY'
import site
import sys
import sysconfig
paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
paths += site.getsitepackages() if hasattr(site, "getsitepackages") else []
paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
print("\n".join(dict.fromkeys(paths)))
PY
# The guard's dependencies and the Hopper CUDA kernel's CuTe/CUTLASS headers, each pinned
# with its hashes; never torch (the runner's, seen through the .pth file above).
"$venv/bin/python" -m pip install "${pip_args[@]}" --require-hashes --no-deps \
    -r "$repo/ci/requirements/runner.txt"
# The checkout itself, as an editable install: its root on the path, and a `guard` command.
printf '%s\n' "$repo" > "$site_dir/_perf_guard_checkout.pth"
printf '#!/bin/sh\nexec "%s" -m guard "$@"\n' "$venv/bin/python" > "$venv/bin/guard"
chmod 0755 "$venv/bin/guard"

"$venv/bin/python" - "$torch_version" <<'PY' || exit 3
import os
import sys
import torch
expected = sys.argv[1]
if torch.__version__ != expected:
    sys.exit(f"torch changed during the install: {expected} -> {torch.__version__}")
if os.environ.get("PERF_GUARD_ALLOW_CPU_TORCH") == "1":
    print(f"torch {torch.__version__} (CPU allowed for this test)")
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU on this runner")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.get_device_name(0)}")
PY

if [[ -n "${GITHUB_PATH:-}" ]]; then
    echo "$venv/bin" >> "$GITHUB_PATH"
fi

# Compile caches per job, under the job's temp folder: kernels built while running
# one PR's code must never be loaded by a later job (the CUDA extension, Triton).
if [[ -n "${GITHUB_ENV:-}" && -n "${RUNNER_TEMP:-}" ]]; then
    {
        echo "ATTN_GUARD_CACHE=$RUNNER_TEMP/attn-guard-cache"
        echo "TRITON_CACHE_DIR=$RUNNER_TEMP/triton-cache"
        echo "TORCH_EXTENSIONS_DIR=$RUNNER_TEMP/torch-extensions"
    } >> "$GITHUB_ENV"
fi
