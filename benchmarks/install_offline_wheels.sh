#!/usr/bin/env bash
# On a GPU machine without network: install the wheels brought along in .whl/ (ignored
# by git; fill it where there is a network, see benchmarks/README.md, and copy it beside
# the tree), without their dependencies. The CUDA kernel's Hopper path needs only the
# nvidia-cutlass wheel's headers; side_by_side.py's FA3 arm the fa3-fwd wheel. Each is
# installed only where what it brings is missing; nothing happens when .whl/ is empty
# or missing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
shopt -s nullglob
wanted=()
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    nvidia_cutlass-*)
      python3 -c "from kernels import cuda_flash; import sys; sys.exit(cuda_flash.cutlass_include() is None)" \
        2>/dev/null || wanted+=("$wheel") ;;
    fa3_fwd-*)
      python3 -c "import fa3_fwd_interface" 2>/dev/null || wanted+=("$wheel") ;;
    *) wanted+=("$wheel") ;;
  esac
done
[ "${#wanted[@]}" -eq 0 ] && exit 0
python3 -m pip install --quiet --no-deps --root-user-action=ignore "${wanted[@]}"
