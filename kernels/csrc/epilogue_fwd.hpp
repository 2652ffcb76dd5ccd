// The epilogue: O from registers through shared memory to global memory.
// Part of the Hopper kernel (its epilogue); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "utils.h"

namespace flash_sm90 {

using namespace cute;

// One warpgroup's rows of O: registers -> its slab of shared memory (stmatrix) -> global
// memory (a TMA store issued by the warpgroup's first thread, which alone can wait for it).
template <typename T, typename TO>
CUTLASS_DEVICE void store_warpgroup_rows(KernelParams<T> const& p,
                                         typename T::SharedStorage& smem, TO const& tOrO,
                                         int thread, Tile tile) {
  using SlabLayout = typename T::SmemLayoutOWarpgroup;
  const int wg = thread / 128;
  const int wg_thread = thread % 128;
  Tensor sO = make_tensor(make_smem_ptr(smem.smem_o.data() + wg * cute::cosize_v<SlabLayout>),
                          SlabLayout{});
  typename T::TiledMmaPVWarpgroup mma_pv;
  auto copy_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, typename T::Element>{}, mma_pv);
  auto thr_copy_o = copy_o.get_thread_slice(wg_thread);
  Tensor out = convert_type<typename T::Element>(tOrO);
  Tensor tOrOut = thr_copy_o.retile_S(out);
  Tensor tOsO = thr_copy_o.partition_D(sO);
  const int bar = int(Bar::OutputWarpgroup) + wg;
  if (wg_thread == 0) tma_store_wait<0>();  // the slab's previous store has read it
  bar_sync(bar, 128);
  cute::copy(copy_o, tOrOut, tOsO);
  cutlass::arch::fence_view_async_shared();  // stmatrix writes -> visible to the TMA store
  bar_sync(bar, 128);
  if (wg_thread == 0) {
    Tensor mO = p.tma_o.get_tma_tensor(p.shape_q);
    Tensor gO = local_tile(mO(_, _, tile.head, tile.batch), Shape<_64, Int<T::kHeadDim>>{},
                           make_coord(tile.m_block * T::kConsumerWarpgroups + wg, _0{}));
    auto block_tma_o = p.tma_o.get_slice(_0{});
    cute::copy(p.tma_o, block_tma_o.partition_S(sO), block_tma_o.partition_D(gO));
    tma_store_arrive();
  }
}

template <typename T, typename TO>
CUTLASS_DEVICE void store_tile(KernelParams<T> const& p, typename T::SharedStorage& smem,
                               TO const& tOrO, int thread, Tile tile) {
  if constexpr (T::kWarpgroupStore) {
    store_warpgroup_rows<T>(p, smem, tOrO, thread, tile);
    return;
  }
  using TileShape = typename T::TileShape;
  Tensor sO = make_tensor(make_smem_ptr(smem.smem_o.data()), typename T::SmemLayoutO{});
  typename T::TiledMmaPV mma_pv;
  auto copy_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, typename T::Element>{}, mma_pv);
  auto thr_copy_o = copy_o.get_thread_slice(thread);
  Tensor out = convert_type<typename T::Element>(tOrO);
  Tensor tOrOut = thr_copy_o.retile_S(out);
  Tensor tOsO = thr_copy_o.partition_D(sO);
  if constexpr (T::kSeparateO) {
    // The previous tile's O store has read the buffer (only its issuing thread can wait).
    if (cutlass::canonical_warp_idx_sync() == T::kWarps - 1 && cute::elect_one_sync()) {
      tma_store_wait<0>();
    }
  }
  // Every warpgroup has finished reading V (whose space O may take), and the buffer is free.
  bar_sync(int(Bar::OutputReady), T::kMmaThreads);
  cute::copy(copy_o, tOrOut, tOsO);
  cutlass::arch::fence_view_async_shared();  // stmatrix writes -> visible to the TMA store
  bar_arrive(int(Bar::OutputWritten), T::kMmaThreads + 32);
  if (cutlass::canonical_warp_idx_sync() == T::kWarps - 1) {
    bar_sync(int(Bar::OutputWritten), T::kMmaThreads + 32);
    Tensor mO = p.tma_o.get_tma_tensor(p.shape_q);
    Tensor gO = local_tile(mO(_, _, tile.head, tile.batch), select<0, 2>(TileShape{}),
                           make_coord(tile.m_block, _0{}));
    auto block_tma_o = p.tma_o.get_slice(_0{});
    if (cute::elect_one_sync()) {
      cute::copy(p.tma_o, block_tma_o.partition_S(sO), block_tma_o.partition_D(gO));
      tma_store_arrive();
    }
  }
}

template <typename T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_fwd_sm90_kernel(CUTE_GRID_CONSTANT KernelParams<T> const p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Pipeline = typename T::Pipeline;
  using PipelineState = typename T::PipelineState;
  extern __shared__ __align__(1024) char smem_raw[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);

  const int warp = cutlass::canonical_warp_idx_sync();
  const int warpgroup = cutlass::canonical_warp_group_idx();
  if (warp == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
    smem.bars.barrier_q[0].init(1);
    smem.bars.barrier_q[1].init(1);
    smem.bars.barrier_o.init(T::kClusterM);
  }
  typename Pipeline::Params pipe_params;
  pipe_params.transaction_bytes = T::kBytesKV;
  pipe_params.role = warpgroup == 0 ? Pipeline::ThreadCategory::Producer
                                    : Pipeline::ThreadCategory::Consumer;
  pipe_params.is_leader = threadIdx.x % 128 == 0;
  pipe_params.num_consumers = T::kMmaThreads;
  // The pipelines' constructors fence the barrier inits.
  Pipeline pipe_k(smem.bars.pipeline_k, pipe_params, typename T::ClusterShape{});
  Pipeline pipe_v(smem.bars.pipeline_v, pipe_params, typename T::ClusterShape{});
  if constexpr (T::kClusterM > 1) {
    // Every CTA's barriers initialized before any other CTA of the cluster signals them.
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {  // producer
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (warp == 0) {
      PipelineState write_k = cutlass::make_producer_start_state<Pipeline>();
      PipelineState write_v = cutlass::make_producer_start_state<Pipeline>();
      int index = blockIdx.x;
      for (int work = 0; index >= 0; ++work) {
        index = load_tile<T, kCausal>(p, smem, pipe_k, pipe_v, write_k, write_v, index, work);
      }
      if (cute::elect_one_sync()) {  // every stage released before the CTA may exit
        pipe_k.producer_tail(write_k);
        pipe_v.producer_tail(write_v);
      }
      if (p.tile_counter != nullptr && threadIdx.x % 32 == 0) {
        // This CTA asks for no more tiles; the last CTA to get here resets the counter
        // for the next launch on the stream (the kernel boundary publishes the reset).
        __threadfence();
        if (atomicAdd(p.tile_counter + 1, 1) == int(gridDim.x) - 1) {
          __threadfence();  // after every CTA's last atomic on the counter
          p.tile_counter[0] = 0;
          p.tile_counter[1] = 0;
        }
      }
    }
  } else {  // consumers
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    typename T::TiledMmaPV mma_pv;
    PipelineState read_k, read_v;
    const int thread = threadIdx.x - 128;
    consumers_start<T>();
    CUTLASS_PRAGMA_NO_UNROLL
    for (int work = 0;; ++work) {
      const int q_stage = work % T::kQStages;
      auto& barrier_q = smem.bars.barrier_q[q_stage];
      const int phase = (work / T::kQStages) % 2;
      auto token_q = static_cast<cutlass::BarrierStatus>(barrier_q.try_wait(phase));
      if (token_q == cutlass::BarrierStatus::WaitAgain) barrier_q.wait(phase);
      compiler_fence();
      const int index = smem.bars.tile_index[q_stage];
      if (index >= p.total_tiles) break;
      const Tile tile = tile_of(p, index, kCausal);
      Tensor tOrO = partition_fragment_C(mma_pv, select<0, 2>(typename T::TileShape{}));
      using SM = Softmax<2 * (2 * T::kBlockM / T::kMmaThreads)>;
      SM softmax;
      float rescale[SM::kRowsPerThread];
      attend_tile<T, kCausal>(p, smem, pipe_k, pipe_v, read_k, read_v, tOrO, softmax,
                              n_block_count<T, kCausal>(p, tile.m_block), thread, work,
                              tile.m_block, rescale);
      store_tile<T>(p, smem, tOrO, thread, tile);
    }
    tma_store_wait<0>();
  }
  if constexpr (T::kClusterM > 1) {
    // No CTA leaves while another may still signal its barriers (the last K and V
    // releases, the last O-store arrival): every thread still running meets here.
    cute::cluster_arrive();
    cute::cluster_wait();
  }
#endif
}

}  // namespace flash_sm90
