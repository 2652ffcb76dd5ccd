// The Hopper kernel of flash_fwd_sm90.cuh for fp16, head_dim 128 (causal and not).
#include "flash_fwd_sm90.cuh"

FLASH_SM90_INSTANTIATE(cutlass::half_t, 128, flash_fwd_sm90_fp16_hdim128)
