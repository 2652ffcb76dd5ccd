"""Compiler reports of the kernels in ``kernels/``: what the compiler made of each one for
a GPU arch, compiled without that GPU.

The registry's ``resources`` hooks (``triton_flash_resources``, ``cuda_flash_resources``:
registers, spills, shared memory, warps, stages, grid, config and path per compiled
kernel), the ``ptxas -v`` parser and cached compiles they share (``ptxas``), Triton's
compile-only driver (``triton_compile``), and the SASS readers of the offline checks.

This package imports ``kernels``; ``kernels`` never imports it (``lint-imports``): the
registry names each hook by its module, imported when the guard asks for a report.
"""
