// Masking of the ragged and causal key columns.
// Part of the Hopper kernel (its masks); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "utils.h"

namespace flash_sm90 {

using namespace cute;

// ---- masking (FlashAttention-3's mask.h) ------------------------------------------
// Sets S to -inf at key columns >= a limit: seq_k - n_block * kBlockN (kSeqMask) and
// row + 1 + m_block * kBlockM - n_block * kBlockN (kCausalMask: query i sees keys
// j <= i). A thread's columns are thread 0's, which are compile-time constants,
// plus one offset; the offset is folded into each row's limit, so every element costs
// one comparison with a constant and no coordinate is kept in registers across steps
// (per-element coordinates made 192x128 causal spill). acc_s may be the first columns of
// S only (key_columns: a narrow last block). Host-callable for the CPU tests.
template <typename T, bool kSeqMask, bool kCausalMask, typename TS>
CUTLASS_HOST_DEVICE void apply_mask(TS& acc_s, int thread, int seq_k, int m_block, int n_block) {
  typename T::TiledMmaQK mma;
  Tensor cS = make_identity_tensor(select<0, 1>(typename T::TileShape{}));
  Tensor tScS = mma.get_thread_slice(thread).partition_C(cS);
  Tensor t0ScS = mma.get_thread_slice(_0{}).partition_C(cS);
  Tensor s = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
  Tensor c = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
  Tensor c0 = make_tensor(t0ScS.data(), acc_rowcol(t0ScS.layout()));
  const int col_offset = int(get<1>(c(_0{}, _0{})));
  const int seq_limit = seq_k - n_block * T::kBlockN - col_offset;
  const int causal_offset = 1 + m_block * T::kBlockM - n_block * T::kBlockN - col_offset;
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    const int row_limit = int(get<0>(c(r, _0{}))) + causal_offset;
    const int limit = !kCausalMask ? seq_limit
                      : !kSeqMask  ? row_limit
                                   : cute::min(seq_limit, row_limit);
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < size<1>(s); ++k) {
      if (int(get<1>(c0(_0{}, k))) >= limit) s(r, k) = -INFINITY;
    }
  }
}

}  // namespace flash_sm90
