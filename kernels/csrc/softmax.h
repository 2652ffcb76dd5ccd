// The online softmax over a warpgroup's rows.
// Part of the Hopper kernel (its softmax); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "utils.h"

namespace flash_sm90 {

using namespace cute;

// ---- online softmax over a warpgroup's 64 rows (each thread holds kRows of them) -----
template <int kRows>
struct Softmax {
  static constexpr int kRowsPerThread = kRows;
  float row_max[kRows];
  float row_sum[kRows];

  // New row maxima; returns the factor by which O and the running sums are rescaled.
  template <bool kFirst, typename TS>
  CUTLASS_DEVICE void max(TS& acc_s, float scale_log2, float (&rescale)[kRows]) {
    Tensor s = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = kFirst ? -INFINITY : row_max[r];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s); ++c) m = fmaxf(m, s(r, c));
      m = quad_max(m);
      if constexpr (kFirst) {
        rescale[r] = 1.f;
      } else {
        // A row with every key masked so far keeps max -inf: use 0 to avoid inf - inf.
        const float cur = m == -INFINITY ? 0.f : m;
        rescale[r] = exp2f((row_max[r] - cur) * scale_log2);
        row_sum[r] *= rescale[r];
      }
      row_max[r] = m;
    }
  }

  // P = exp2(S * scale - max * scale), accumulated into the row sums (per thread).
  template <bool kFirst, typename TS>
  CUTLASS_DEVICE void exp_sum(TS& acc_s, float scale_log2) {
    Tensor s = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float shift = row_max[r] == -INFINITY ? 0.f : row_max[r] * scale_log2;
      float sum = kFirst ? 0.f : row_sum[r];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = exp2f(s(r, c) * scale_log2 - shift);
        sum += s(r, c);
      }
      row_sum[r] = sum;
    }
  }

  // 1 / rowsum (0 for a row that saw no key: cannot happen with seq_k >= 1).
  CUTLASS_DEVICE void finalize(float (&rescale)[kRows]) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      rescale[r] = (sum == 0.f || sum != sum) ? 0.f : 1.f / sum;
    }
  }

  template <typename TO>
  CUTLASS_DEVICE static void rescale_o(TO& acc_o, float const (&rescale)[kRows]) {
    Tensor o = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
    static_assert(decltype(size<0>(o))::value == kRows);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= rescale[r];
    }
  }
};

}  // namespace flash_sm90
