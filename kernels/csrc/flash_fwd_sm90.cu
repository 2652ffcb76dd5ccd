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

namespace {

// cudaMalloc in relaxed capture mode for this call: while a graph is captured in global
// mode (this thread's or another's), a plain cudaMalloc would fail and invalidate it.
int* allocate_counter() {
  int* counter = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t allocated = cudaMalloc(&counter, 2 * sizeof(int));
  cudaThreadExchangeStreamCaptureMode(&mode);  // this thread's own mode again
  if (allocated != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return counter;
}

// Zeroed on the stream itself, ordered before the launch that will read it; under
// capture this is a memset node of the graph, run before the kernel at every replay.
int* zeroed_on(cudaStream_t stream, int* counter) {
  if (counter == nullptr) return nullptr;
  if (cudaMemsetAsync(counter, 0, 2 * sizeof(int), stream) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(counter);
    return nullptr;
  }
  return counter;
}

}  // namespace

int* flash_fwd_sm90_tile_counter(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long stream_id = 0;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();  // the error it just set: the static stride instead
    return nullptr;
  }
  if (capture == cudaStreamCaptureStatusActive) {
    // A counter of its own for each captured launch, so that graphs replayed on
    // different streams never share one (the guard times causal cases as graph
    // replays). Never freed: the graph may be replayed for the life of the process.
    // One limit: two executable graphs instantiated from one capture share it, and
    // must not be replayed at the same time.
    return zeroed_on(stream, allocate_counter());
  }
  if (capture != cudaStreamCaptureStatusNone || cudaStreamGetId(stream, &stream_id) != cudaSuccess) {
    cudaGetLastError();
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
  int* counter = zeroed_on(stream, allocate_counter());
  if (counter != nullptr) counters.emplace(key, counter);
  return counter;
}
