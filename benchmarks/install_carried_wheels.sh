#!/usr/bin/env bash
# On a GPU machine without network: install the wheels brought along in .whl/ (ignored
# by git; fill it where there is a network with `pip download --no-deps
# nvidia-cutlass==4.2.0.0 -d .whl` and copy it beside the tree), without their dependencies: the CUDA kernel's
# Hopper path needs only the nvidia-cutlass wheel's headers. Does nothing when .whl/ is
# empty or missing, or when the CUTLASS headers are already found.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
shopt -s nullglob
wheels=(.whl/*.whl)
[ "${#wheels[@]}" -eq 0 ] && exit 0
python3 -c "from kernels import cuda_flash; import sys; sys.exit(cuda_flash.cutlass_include() is None)" \
  2>/dev/null && exit 0
python3 -m pip install --quiet --no-deps --root-user-action=ignore "${wheels[@]}"
