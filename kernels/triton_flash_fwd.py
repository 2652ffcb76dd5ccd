"""The entry point's former module, kept as an alias: the entry point users call is
``kernels.flash_attention.flash_attention_fwd`` (registry name ``flash_attention``);
``from kernels.triton_flash_fwd import flash_attention_fwd`` keeps working."""

from kernels.flash_attention import flash_attention_fwd

__all__ = ["flash_attention_fwd"]
