// FlashAttention-2 forward: the interface between the kernel TU and the torch binding.
//
// This header and flash_fwd.cu include no torch header, so the kernel compiles with a
// plain `nvcc -c` on a machine whose torch is a CPU-only build (the CPU test does
// that for sm_80, sm_89 and sm_90a). binding.cpp holds everything that needs torch.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

struct FlashFwdParams {
  // (batch, heads, seq, head_dim) tensors, last dim contiguous. Strides are in
  // elements; every stride must be a multiple of 8 and every pointer 16-byte aligned
  // (K and V rows are copied with 16-byte cp.async; binding.cpp ensures both).
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int batch;
  int heads;     // query heads
  int heads_kv;  // key/value heads; heads % heads_kv == 0 (grouped-query attention)
  int seq_q;     // >= 1
  int seq_k;     // >= 0
  int head_dim;  // 64 or 128
  float scale_log2;  // softmax scale * log2(e): the kernel uses exp2f
  bool causal;       // top-left aligned: query i sees keys j <= i (torch SDPA is_causal)
  bool is_bf16;      // else fp16
};

// Launches the kernel on `stream`. Returns cudaErrorInvalidValue for a head_dim or
// shape it does not support, else the launch's cudaGetLastError().
cudaError_t flash_fwd_launch(const FlashFwdParams& params, cudaStream_t stream);

// The Hopper kernel (flash_fwd_sm90*.cu: CuTe, wgmma, TMA, warp specialization), built
// only for sm_90a. Same contract as flash_fwd_launch, plus seq_k >= 1 (the caller
// returns zeros for an empty key axis) and the strides and pointers TMA needs (every
// stride but the unit one a multiple of 8 elements, 16-byte aligned pointers, O too).
cudaError_t flash_fwd_sm90_launch(const FlashFwdParams& params, cudaStream_t stream);

// The Hopper kernel's tile counter for `stream` on `device` (two ints, zero between
// launches: the kernel's last CTA resets them). One per stream, so that launches on
// concurrent streams never share one; allocated on first use and kept. Under graph
// capture, one for each captured launch, zeroed by a memset node of the graph before
// it. nullptr if allocation fails: the kernel then shares its tiles out by a static
// stride.
int* flash_fwd_sm90_tile_counter(int device, cudaStream_t stream);

// Below this much work (batch * heads * seq_q * seq_k) the mma.sync kernel is the faster
// one on an H100: the Hopper kernel's four TMA descriptors cost more host time than such
// a kernel runs (measured side by side: (1, 8, 128, 64) 0.87x cuDNN's time with
// mma.sync, 0.94-1.31x with the Hopper kernel; (1, 8, 512, 64) 1.04x against 0.95x).
constexpr long long kHopperMinWork = 1LL << 20;

inline bool flash_fwd_hopper_pays(const FlashFwdParams& p) {
  return static_cast<long long>(p.batch) * p.heads * p.seq_q * p.seq_k >= kHopperMinWork;
}
