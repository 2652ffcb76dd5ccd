// Dispatch of the Hopper (sm_90a) kernel over dtype and head_dim; the kernels are in
// flash_fwd_sm90.cuh, instantiated by flash_fwd_sm90_{fp16,bf16}_hdim{64,128}.cu.
#include "flash_fwd.h"

cudaError_t flash_fwd_sm90_fp16_hdim64(const FlashFwdParams& p, cudaStream_t stream);
cudaError_t flash_fwd_sm90_fp16_hdim128(const FlashFwdParams& p, cudaStream_t stream);
cudaError_t flash_fwd_sm90_bf16_hdim64(const FlashFwdParams& p, cudaStream_t stream);
cudaError_t flash_fwd_sm90_bf16_hdim128(const FlashFwdParams& p, cudaStream_t stream);

cudaError_t flash_fwd_sm90_launch(const FlashFwdParams& p, cudaStream_t stream) {
  if (p.seq_q < 1 || p.seq_k < 1 || p.batch < 1 || p.heads < 1 || p.heads_kv < 1 ||
      p.heads % p.heads_kv != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.head_dim == 64) {
    return p.is_bf16 ? flash_fwd_sm90_bf16_hdim64(p, stream)
                     : flash_fwd_sm90_fp16_hdim64(p, stream);
  }
  if (p.head_dim == 128) {
    return p.is_bf16 ? flash_fwd_sm90_bf16_hdim128(p, stream)
                     : flash_fwd_sm90_fp16_hdim128(p, stream);
  }
  return cudaErrorInvalidValue;
}
