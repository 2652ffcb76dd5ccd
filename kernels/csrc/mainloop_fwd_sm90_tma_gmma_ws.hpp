// The main loop: the producer's TMA loads and the consumers' ping-pong of wgmma and softmax.
// Part of the Hopper kernel (its main loop); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "mask.h"
#include "softmax.h"
#include "tile_scheduler.hpp"

namespace flash_sm90 {

using namespace cute;

// ---- producer: TMA loads of Q, K, V ------------------------------------------------
// The next tile for this CTA: the static stride, or the counter's next index (every
// CTA's first tile is its blockIdx.x). Called by the whole producer warp.
template <typename T>
CUTLASS_DEVICE int next_tile_index(KernelParams<T> const& p, int index) {
  if (p.tile_counter == nullptr) return index + gridDim.x;
  int next = 0;
  if (threadIdx.x % 32 == 0) next = atomicAdd(p.tile_counter, 1);
  return __shfl_sync(0xffffffff, next, 0) + gridDim.x;
}

// Loads tile `index` (its Q into buffer work % kQStages, its K and V into the ring) and
// returns the index of the CTA's next tile; for an index past the last tile, sends the
// consumers the stop and returns -1.
template <typename T, bool kCausal>
CUTLASS_DEVICE int load_tile(KernelParams<T> const& p, typename T::SharedStorage& smem,
                             typename T::Pipeline& pipe_k, typename T::Pipeline& pipe_v,
                             typename T::PipelineState& write_k,
                             typename T::PipelineState& write_v, int index, int work) {
  using TileShape = typename T::TileShape;
  const int q_stage = work % T::kQStages;
  const bool leader = cute::elect_one_sync();
  if (index >= p.total_tiles) {
    bar_sync(query_empty_bar(q_stage), T::kMmaThreads + 32);
    if (leader) {
      smem.bars.tile_index[q_stage] = index;
      compiler_fence();
      smem.bars.barrier_q[q_stage].arrive();  // release: the consumers see the index
    }
    return -1;
  }
  const Tile tile = tile_of(p, index, kCausal);
  Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q[q_stage].data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename T::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.smem_v.data()), typename T::SmemLayoutV{});
  Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);
  Tensor mK = p.tma_k.get_tma_tensor(p.shape_k);
  Tensor mV = p.tma_v.get_tma_tensor(p.shape_k);
  const int head_kv = tile.head / p.heads_per_kv;
  Tensor gK = local_tile(mK(_, _, head_kv, tile.batch), select<1, 2>(TileShape{}),
                         make_coord(_, _0{}));
  Tensor gV = local_tile(mV(_, _, head_kv, tile.batch), select<1, 2>(TileShape{}),
                         make_coord(_, _0{}));
  Tensor sQx = make_tensor(sQ.data(), make_layout(sQ.layout(), Layout<_1>{}));
  // Tile t's Q as the TMA's source and this Q buffer as its destination.
  auto q_partition = [&](Tile const& t) {
    Tensor gQ = local_tile(mQ(_, _, t.head, t.batch), select<0, 2>(TileShape{}),
                           make_coord(t.m_block, _0{}));
    Tensor gQx = make_tensor(gQ.data(), make_layout(gQ.layout(), Layout<_1>{}));
    return tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQx),
                         group_modes<0, 2>(gQx));
  };
  auto [tQgQ, tQsQ] = q_partition(tile);
  // In a cluster each CTA loads its share of a K or V tile and multicasts it to all.
  const int cta_rank = T::kClusterM == 1 ? 0 : int(cute::block_rank_in_cluster());
  constexpr uint16_t kMcastMask = T::kClusterM == 1 ? 0 : uint16_t((1u << T::kClusterM) - 1);
  auto [tKgK, tKsK] = tma_partition(p.tma_k, cta_rank, Layout<Int<T::kClusterM>>{},
                                    group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVgV, tVsV] = tma_partition(p.tma_v, cta_rank, Layout<Int<T::kClusterM>>{},
                                    group_modes<0, 2>(sV), group_modes<0, 2>(gV));

  // Steps j = n_blocks - 1 .. 0 take key blocks j, or with a narrow last block (see
  // Traits::kLastKeys) blocks j - 1 and, at step 0, the ragged block n_blocks - 1. That
  // one is loaded after the loop, its index computed there: one more register held across
  // the loop spills at the producer's 24.
  constexpr int kLastStep = T::kNarrowLast ? 1 : 0;
  int n_block = n_block_count<T, kCausal>(p, tile.m_block) - 1;
  if (leader) {
    pipe_k.producer_acquire(write_k);
    copy(p.tma_k.with(*pipe_k.producer_get_barrier(write_k), kMcastMask),
         tKgK(_, n_block - kLastStep), tKsK(_, write_k.index()));
    ++write_k;
  }
  // Q's buffer is free once every consumer is past its last Q K^T of the tile it held.
  bar_sync(query_empty_bar(q_stage), T::kMmaThreads + 32);
  if (leader) {
    smem.bars.tile_index[q_stage] = index;
    compiler_fence();
    smem.bars.barrier_q[q_stage].arrive_and_expect_tx(T::kBytesQ);
    copy(p.tma_q.with(reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(
                          smem.bars.barrier_q[q_stage]),
                      0),
         tQgQ, tQsQ);
  }
  // V's ring holds the previous tile's O until its TMA store has read it.
  if constexpr (!T::kSeparateO) smem.bars.barrier_o.wait((work + 1) % 2);
  if (leader) {
#pragma unroll 2
    for (; n_block > kLastStep; --n_block) {
      pipe_k.producer_acquire(write_k);
      copy(p.tma_k.with(*pipe_k.producer_get_barrier(write_k), kMcastMask),
           tKgK(_, n_block - 1 - kLastStep), tKsK(_, write_k.index()));
      ++write_k;
      pipe_v.producer_acquire(write_v);
      copy(p.tma_v.with(*pipe_v.producer_get_barrier(write_v), kMcastMask),
           tVgV(_, n_block - kLastStep), tVsV(_, write_v.index()));
      ++write_v;
    }
    int v_block = 0;  // step 0's (j = n_block = 0 without a narrow last block)
    if constexpr (T::kNarrowLast) {  // j = 1, then step 0: the ragged block
      v_block = (get<0>(p.shape_k) - 1) / T::kBlockN;
      pipe_k.producer_acquire(write_k);
      copy(p.tma_k.with(*pipe_k.producer_get_barrier(write_k), kMcastMask), tKgK(_, v_block),
           tKsK(_, write_k.index()));
      ++write_k;
      pipe_v.producer_acquire(write_v);
      copy(p.tma_v.with(*pipe_v.producer_get_barrier(write_v), kMcastMask), tVgV(_, 0),
           tVsV(_, write_v.index()));
      ++write_v;
    }
    pipe_v.producer_acquire(write_v);
    copy(p.tma_v.with(*pipe_v.producer_get_barrier(write_v), kMcastMask), tVgV(_, v_block),
         tVsV(_, write_v.index()));
    ++write_v;
  }
  // Asked for once this tile's loads are issued: the producer is ahead of the consumers
  // by the ring's depth, which covers the atomic's round trip.
  const int next = next_tile_index(p, index);
  // With one Q buffer the next tile's Q loads only once this tile's last Q K^T is done:
  // bring it into L2 now (FLASH_SM90_PREFETCH_NEXT_Q).
  if constexpr (FLASH_SM90_PREFETCH_NEXT_Q && T::kQStages == 1) {
    if (next < p.total_tiles && cute::elect_one_sync()) {
      cute::prefetch(p.tma_q, get<0>(q_partition(tile_of(p, next, kCausal))));
    }
  }
  return next;
}

// ---- consumers: the ping-pong between warpgroups --------------------------------------
// Whether the consumers wait for and release the K and V slots through CUTLASS's pipeline
// class, whose role checks (a `brkpt` behind a branch at each call, compiled in without
// NDEBUG) are also fences to ptxas's scheduler: without them it waits for P V before the
// softmax of head_dim 128's causal and 128-key kernels. Head_dim 64's non-causal 192-key
// tiles (one CTA) run 2.5-3.3% faster without them (H200, `--set d64-full`; see
// docs/notes/cuda-kernel-measurements.md): they use the barriers directly.
template <typename T, bool kCausal>
constexpr bool kRingChecks =
    FLASH_SM90_D64_RING_CHECKS || kCausal || T::kHeadDim != 64 || T::kBlockN != 192;

template <typename T>
CUTLASS_DEVICE void warpgroup_turn_wait() {
  if constexpr (kPingPong) {
    bar_sync(int(Bar::WarpgroupBase) + cutlass::canonical_warp_group_idx(), T::kMmaThreads);
  }
}

template <typename T>
CUTLASS_DEVICE void warpgroup_turn_pass() {
  if constexpr (kPingPong) {
    const int wg = cutlass::canonical_warp_group_idx();  // 1 .. kConsumerWarpgroups
    if constexpr (T::kConsumerWarpgroups == 2) {
      bar_arrive(int(Bar::WarpgroupBase) + (3 - wg), T::kMmaThreads);
    } else {  // 3: pass to the next two
      bar_arrive(int(Bar::WarpgroupBase) + (wg <= 2 ? wg + 1 : wg + 1 - 3), T::kMmaThreads);
      bar_arrive(int(Bar::WarpgroupBase) + (wg <= 1 ? wg + 2 : wg + 2 - 3), T::kMmaThreads);
    }
  }
}

template <typename T>
CUTLASS_DEVICE void consumers_start() {
  for (int q_stage = 0; q_stage < T::kQStages; ++q_stage) {
    bar_arrive(query_empty_bar(q_stage), T::kMmaThreads + 32);
  }
  if constexpr (kPingPong) {
    const int wg = cutlass::canonical_warp_group_idx();
    if (wg > 1) bar_arrive(int(Bar::WarpgroupBase) + 1, T::kMmaThreads);
    if constexpr (T::kConsumerWarpgroups == 3) {
      if (wg > 2) bar_arrive(int(Bar::WarpgroupBase) + 2, T::kMmaThreads);
    }
  }
}

// S's first kKeys key columns (all of S at kBlockN): a wgmma accumulator holds a
// thread's columns in the same order at every width, so a narrower product's fragment
// is a prefix of the full one.
template <typename T, int kKeys, typename TS>
CUTLASS_DEVICE auto key_columns(TS& tSrS) {
  if constexpr (kKeys == T::kBlockN) {
    return make_tensor(tSrS.data(), tSrS.layout());
  } else {
    static_assert(kKeys == T::kLastKeys);
    typename T::TiledMmaQKLast mma;
    return make_tensor(
        tSrS.data(), partition_fragment_C(mma, Shape<Int<T::kBlockM>, Int<kKeys>>{}).layout());
  }
}

template <typename T, bool kCausal, typename TO, typename SM>
CUTLASS_DEVICE void attend_tile(KernelParams<T> const& p, typename T::SharedStorage& smem,
                                typename T::Pipeline& pipe_k, typename T::Pipeline& pipe_v,
                                typename T::PipelineState& read_k,
                                typename T::PipelineState& read_v, TO& tOrO, SM& softmax,
                                int n_blocks, int thread, int work, int m_block,
                                float (&rescale)[SM::kRowsPerThread]) {
  using TileShape = typename T::TileShape;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kBlockN = T::kBlockN;
  const int q_stage = work % T::kQStages;
  Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q[q_stage].data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename T::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.smem_v.data()), typename T::SmemLayoutVt{});
  typename T::TiledMmaQK mma_qk;
  typename T::TiledMmaPV mma_pv;
  mma_pv.accumulate_ = GMMA::ScaleOut::Zero;  // the first P V product overwrites O
  // The shared-memory descriptors of Q, K and V depend on a thread's warpgroup only.
  // Taken at the warpgroup's first thread, from a warp shuffle of its index (uniform to
  // the compiler), they stay in uniform registers, as FlashAttention-3 has them; taken
  // at the thread, ptxas moves Q's 16 into uniform registers at every step (R2UR).
  // FLASH_SM90_UNIFORM_DESCRIPTORS picks the former.
  const int slice = FLASH_SM90_UNIFORM_DESCRIPTORS
                        ? __shfl_sync(0xffffffff, thread / cutlass::NumThreadsPerWarpGroup, 0) *
                              cutlass::NumThreadsPerWarpGroup
                        : thread;
  auto part_qk = mma_qk.get_thread_slice(slice);
  auto part_pv = mma_pv.get_thread_slice(slice);
  Tensor tSrQ = part_qk.partition_fragment_A(sQ);
  Tensor tSrK = part_qk.partition_fragment_B(sK);
  Tensor tOrV = part_pv.partition_fragment_B(sVt);
  // A K or V slot waited for and released: through CUTLASS's pipeline, or on the ring's
  // barriers directly where its checks cost time (kRingChecks).
  auto wait = [](auto& pipe, auto& ring, auto& state) {
    if constexpr (kRingChecks<T, kCausal>) {
      auto token = pipe.consumer_try_wait(state);
      pipe.consumer_wait(state, token);
    } else {
      auto& full = ring.full_barrier_[state.index()];
      if (!full.try_wait(state.phase())) full.wait(state.phase());
    }
  };
  auto release = [](auto& pipe, auto& ring, auto& state) {
    if constexpr (kRingChecks<T, kCausal>) {
      pipe.consumer_release(state);
    } else {
      // One CTA: every consumer thread arrives (the pipeline's arrival count there).
      static_assert(T::kClusterM == 1);
      ring.empty_barrier_[state.index()].arrive();
    }
  };

  const int seq_k = get<0>(p.shape_k);
  // The steps left after this one, counted down; also the key block of the step it
  // counts, except with a narrow last block (Traits::kLastKeys: blocks n_block - 1, then
  // the ragged one last).
  int n_block = n_blocks - 1;
  static_assert(!(kCausal && T::kNarrowLast));

  Tensor tSrS = partition_fragment_C(mma_qk, select<0, 1>(TileShape{}));
  wait(pipe_k, smem.bars.pipeline_k, read_k);
  warpgroup_turn_wait<T>();
  gemm<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
  warpgroup_turn_pass<T>();
  if (!T::kSeparateO && work != 0) {
    // The previous tile's O store has read the V ring's space: the producer may refill it.
    // In a cluster every CTA's producer waits for all of them: its multicast V lands in
    // each CTA's ring. (One arrival per CTA and tile: no CTA can be a whole tile ahead
    // of another, whose consumers release every K slot it loads, as long as a tile has
    // more key blocks than the ring has stages, which launch_full_tiles requires.)
    if (cutlass::canonical_warp_idx_sync() == T::kWarps - 1 && cute::elect_one_sync()) {
      tma_store_wait<0>();
      if constexpr (T::kClusterM == 1) {
        smem.bars.barrier_o.arrive();
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int cta = 0; cta < T::kClusterM; ++cta) smem.bars.barrier_o.arrive(cta, true);
      }
    }
  }
  warpgroup_wait<0>();
  release(pipe_k, smem.bars.pipeline_k, read_k);
  ++read_k;
  // Unmasked where the ragged block comes last (this one is then whole).
  if constexpr (!T::kNarrowLast) apply_mask<T, true, kCausal>(tSrS, thread, seq_k, m_block, n_block);
  softmax.template max<true>(tSrS, p.scale_log2, rescale);
  softmax.template exp_sum<true>(tSrS, p.scale_log2);
  Tensor tOrP = make_tensor(convert_type<typename T::Element>(tSrS).data(),
                            acc_as_a_operand(tSrS.layout()));
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < SM::kRowsPerThread; ++r) rescale[r] = 1.f;

  // One step: S_j = Q K_j^T issued, then (overlapped) O += P_{j+1} V_{j+1}, then softmax of S_j.
  // keys: Int<kBlockN>, or Int<kLastKeys> for the narrow last block (whose S is masked
  // at seq_k and whose P V, after the loop, takes as many keys).
  auto step = [&](auto masked, auto keys) {
    constexpr int kKeys = decltype(keys)::value;
    Tensor tSrS = partition_fragment_C(mma_qk, select<0, 1>(TileShape{}));
    wait(pipe_k, smem.bars.pipeline_k, read_k);
    warpgroup_turn_wait<T>();
    if constexpr (kKeys == kBlockN) {
      gemm<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
    } else {
      // The slot's first kKeys keys. A wgmma's shared-memory descriptors do not hold its
      // width: the full product's descriptors of Q and of the slot serve.
      typename T::TiledMmaQKLast mma_last;
      Tensor tSrSLast = key_columns<T, kKeys>(tSrS);
      gemm<true, -1>(mma_last, tSrQ, tSrK(_, _, _, read_k.index()), tSrSLast);
    }
    if constexpr (!kIntraWarpgroupOverlap) warpgroup_wait<0>();
    if constexpr (!T::kRescaleAfterPV) SM::rescale_o(tOrO, rescale);
    wait(pipe_v, smem.bars.pipeline_v, read_v);
    gemm<false, -1>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
    warpgroup_turn_pass<T>();
    warpgroup_wait<1>();
    if constexpr (!T::kReleaseKAfterSoftmax) {
      // ptxas waits for P V at this release in a full step (see kReleaseKAfterSoftmax); in
      // the narrow one it moved the release past the softmax, kept P V in flight and
      // spilled: the wait is written out there.
      if constexpr (kKeys < kBlockN) warpgroup_wait<0>();
      release(pipe_k, smem.bars.pipeline_k, read_k);
    }
    Tensor s = key_columns<T, kKeys>(tSrS);
    if constexpr (decltype(masked)::value) {
      // Only the causal diagonal: every key of a block before the last is < seq_k.
      apply_mask<T, false, true>(s, thread, seq_k, m_block, n_block - 1);
    }
    if constexpr (kKeys < kBlockN) {
      // The ragged block n_blocks - 1. Its operands are read again here rather than held
      // across the loop, where one more live register spills on clusters.
      const int seq_k_param = get<0>(p.shape_k);
      apply_mask<T, true, false>(s, consumer_thread_index(), seq_k_param, 0,
                                 (seq_k_param - 1) / kBlockN);
    }
    softmax.template max<false>(s, p.scale_log2, rescale);
    softmax.template exp_sum<false>(s, p.scale_log2);
    // Here, not before the softmax: ptxas hoists the wait below up to the closest memory
    // operation before it, and a K release there made the softmax wait for P V.
    if constexpr (T::kReleaseKAfterSoftmax) release(pipe_k, smem.bars.pipeline_k, read_k);
    warpgroup_wait<0>();
    release(pipe_v, smem.bars.pipeline_v, read_v);
    if constexpr (T::kRescaleAfterPV) SM::rescale_o(tOrO, rescale);
    ++read_k;
    ++read_v;
    cute::copy(make_tensor(convert_type<typename T::Element>(tSrS).data(),
                           acc_as_a_operand(tSrS.layout())),
               tOrP);
  };

  if constexpr (kCausal) {
    // Key blocks after the first that cross the diagonal: the diagonal of this tile
    // starts at column m_block * kBlockM, a multiple of kBlockN when kBlockN divides
    // kBlockM (top-left alignment), so it crosses kBlockM / kBlockN blocks, the first
    // one included; otherwise at most one more.
    constexpr int kMaskedSteps =
        kBlockM % kBlockN == 0 ? kBlockM / kBlockN - 1 : cute::ceil_div(kBlockM, kBlockN);
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kMaskedSteps && n_block > 0; ++s, --n_block) {
      step(cute::true_type{}, Int<kBlockN>{});
    }
  }
  // The ragged block's step, if narrow, comes after the loop (the host sends >= 2 blocks).
  constexpr int kNarrowSteps = T::kNarrowLast ? 1 : 0;
  CUTLASS_PRAGMA_NO_UNROLL
  for (; n_block > kNarrowSteps; --n_block) step(cute::false_type{}, Int<kBlockN>{});
  if constexpr (T::kNarrowLast) {
    step(cute::false_type{}, Int<T::kLastKeys>{});
    --n_block;
  }

  // Q is no longer read: the producer may load a later tile's into its buffer.
  bar_arrive(query_empty_bar(q_stage), T::kMmaThreads + 32);
  if constexpr (!T::kRescaleAfterPV) SM::rescale_o(tOrO, rescale);
  wait(pipe_v, smem.bars.pipeline_v, read_v);
  // P's columns past kLastKeys (converted from S registers a narrow Q K^T never wrote)
  // are not read: the product takes kLastKeys / 16 k-blocks.
  gemm<false, -1, T::kLastKeys / 16>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
  softmax.finalize(rescale);
  warpgroup_wait<0>();
  release(pipe_v, smem.bars.pipeline_v, read_v);
  ++read_v;
  SM::rescale_o(tOrO, rescale);
}

}  // namespace flash_sm90
