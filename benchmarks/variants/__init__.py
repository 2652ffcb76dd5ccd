"""Kernel variants timed side by side by ``benchmarks/triton_variants.py``."""
