"""A correctness-and-performance guard for GPU kernels: run, compare, decide, report."""

__version__ = "0.1.0"
