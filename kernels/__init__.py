"""Attention kernels under guard, and adapters for the references they are measured against."""

from kernels.registry import REGISTRY, KernelSpec, get, register

__all__ = ["REGISTRY", "KernelSpec", "get", "register"]
