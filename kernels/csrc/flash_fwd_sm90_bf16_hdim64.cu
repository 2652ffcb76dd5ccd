// The Hopper kernel of flash_fwd_sm90.cuh for bf16, head_dim 64 (causal and not).
#include "flash_fwd_sm90.cuh"

FLASH_SM90_INSTANTIATE(cutlass::bfloat16_t, 64, flash_fwd_sm90_bf16_hdim64)
