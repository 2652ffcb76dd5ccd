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
  unsigned long long stream_id = 0;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone ||
      cudaStreamGetId(stream, &stream_id) != cudaSuccess) {
    cudaGetLastError();  // the error these calls just set: the static stride instead
    return nullptr;
  }
  // Keyed by the stream's id, not its handle: a destroyed stream's handle can come back
  // for a new stream while the old one's work still runs. Never freed: two ints for each
  // stream that ever ran a causal launch, for the life of the process.
  static std::mutex mutex;
  static std::map<std::pair<int, unsigned long long>, int*> counters;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, stream_id);
  const auto found = counters.find(key);
  if (found != counters.end()) return found->second;
  int* counter = nullptr;
  // Relaxed for this call: while another thread captures a graph in global mode, a plain
  // cudaMalloc would fail and invalidate that capture.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t allocated = cudaMalloc(&counter, 2 * sizeof(int));
  cudaThreadExchangeStreamCaptureMode(&mode);  // this thread's own mode again
  if (allocated != cudaSuccess) {
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
