// Dispatch of the Hopper (sm_90a) kernel over dtype and head_dim; the kernels are in
// flash_fwd_sm90.cuh, instantiated by flash_fwd_sm90_{fp16,bf16}_hdim{64,128}.cu.
#include "flash_fwd.h"

#include <map>
#include <mutex>
#include <utility>

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

int* flash_fwd_sm90_tile_counter(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return nullptr;
  }
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, int*> counters;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, stream);
  const auto found = counters.find(key);
  if (found != counters.end()) return found->second;
  int* counter = nullptr;
  if (cudaMalloc(&counter, 2 * sizeof(int)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  // On the stream itself: ordered before the launch that will read it.
  if (cudaMemsetAsync(counter, 0, 2 * sizeof(int), stream) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(counter);
    return nullptr;
  }
  counters.emplace(key, counter);
  return counter;
}
