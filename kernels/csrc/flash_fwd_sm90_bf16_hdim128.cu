// The Hopper kernel of flash_fwd_sm90.cuh for bf16, head_dim 128 (causal and not).
#include "flash_fwd_sm90.cuh"

FLASH_SM90_INSTANTIATE(cutlass::bfloat16_t, 128, flash_fwd_sm90_bf16_hdim128)
