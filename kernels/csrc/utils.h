// Small tensor helpers: accumulator layouts, warpgroup GEMMs, conversions.
// Part of the Hopper kernel (its helpers); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "named_barrier.hpp"

namespace flash_sm90 {

using namespace cute;

// ---- small tensor helpers (FlashAttention-3's utils.h) ------------------------------

// Accumulator layout ((2, 2, V), MMA_M, MMA_N) as (rows=(2, MMA_M), cols=(2, V, MMA_N)).
template <typename Layout>
CUTLASS_HOST_DEVICE auto acc_rowcol(Layout l) {
  static_assert(decltype(rank<0>(l))::value == 3);
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// S's accumulator layout as the A-operand register layout of the P V product.
template <typename Layout>
CUTLASS_DEVICE auto acc_as_a_operand(Layout l) {
  using X = Underscore;
  auto d = logical_divide(get<0>(l), Shape<X, X, _2>{});  // (2, 2, (2, N / 16))
  return make_layout(make_layout(get<0>(d), get<1>(d), get<2, 0>(d)), get<1>(l),
                     make_layout(get<2, 1>(d), get<2>(l)));
}

// A view of a local array (FlashAttention-3's convert_type_unsafe): valid only because
// every caller is inlined and uses it within one expression or block. An owning copy
// measured 10-20% slower (H100, docs/PERFORMANCE.md), and a consumer loop restructured
// so that P outlived the expression gave wrong P V products with this view.
template <typename To, typename Engine, typename Layout>
CUTLASS_DEVICE auto convert_type(Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int n = decltype(size(t))::value;
  cutlass::NumericArrayConverter<To, From, n> op;
  auto frag = op(*reinterpret_cast<cutlass::Array<From, n> const*>(t.data()));
  return make_tensor(make_rmem_ptr<To>(&frag), t.layout());
}

// Issue one warpgroup GEMM (its first kKBlocks k-blocks; -1: all) and commit it; wait
// only if asked.
template <bool kZeroInit, int kWait, int kKBlocks = -1, typename TiledMma, typename TA,
          typename TB, typename TC>
CUTLASS_DEVICE void gemm(TiledMma& mma, TA const& a, TB const& b, TC& c) {
  constexpr int kBlocks = kKBlocks < 0 ? int(decltype(size<2>(a))::value) : kKBlocks;
  constexpr bool kRegA = !is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTLASS_PRAGMA_UNROLL
  for (int k = 0; k < kBlocks; ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
}

CUTLASS_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
}
CUTLASS_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 2);
  return x + __shfl_xor_sync(0xffffffff, x, 1);
}

}  // namespace flash_sm90
