// FlashAttention forward for Hopper (sm_90a): CuTe/CUTLASS with wgmma, TMA and warp
// specialization. Included by the flash_fwd_sm90_*.cu instantiation files (one per
// dtype and head_dim, so that the extension build compiles them in parallel).
//
// Structure (FlashAttention-3, Shah et al. 2024; this is a condensed form of its first
// public release, hopper/ in Dao-AILab/flash-attention at 7f67966, BSD-3-Clause):
//  * One CTA = a producer warpgroup and 2 consumer warpgroups (3 with 192-row tiles, a
//    tuning option); each consumer warpgroup owns 64 query rows of the CTA's tile. The grid is
//    persistent: one CTA per SM walks the (m_block, head, batch) tiles. Without a causal
//    mask every tile costs the same and a static stride shares them out; causal tiles
//    cost 1 to seq_k / kBlockN key blocks, so they go heaviest first to whichever CTA
//    asks next (an atomic counter in global memory that the last CTA resets): a static
//    stride left one CTA a full-length tile after the others ran out (measured on an
//    H100 at (1,16,16,16384,128) causal: 1.20x cuDNN's time before, 0.98x after).
//  * The producer's first warp picks each tile, loads its Q into one of kQStages buffers
//    (two where shared memory allows, so the next tile's Q lands while this one ends; with
//    one, the next tile's Q is prefetched into L2 while this one runs)
//    with the tile's index beside it for the consumers, and streams K and V through a
//    kStages-deep shared-memory ring with TMA (cp.async.bulk.tensor), each stage
//    completing on an mbarrier (cutlass::PipelineTmaAsync); out-of-bounds rows of the
//    last tile are zero-filled by TMA and masked below. An index past the last tile,
//    sent the same way, tells the consumers to stop. Head_dim 128 without a mask runs
//    on clusters of two CTAs where a head's row blocks pair up: the static stride gives
//    the pair neighbouring row blocks of one head, and each CTA loads half of every K
//    and V tile and multicasts it to both (the ring's barriers count both CTAs).
//  * Consumers: S = Q K^T (wgmma, both operands in shared memory), online softmax in
//    fp32 registers with exp2, O += P V (wgmma, P from registers, V from shared memory).
//    Two overlaps hide the softmax behind the tensor cores:
//      - intra-warpgroup: tile j's S = Q K_j^T is issued before tile j-1's P V is waited
//        for, so the softmax of one tile runs while the other's products are in flight;
//      - inter-warpgroup ("ping-pong"): named barriers order the warpgroups' matrix
//        products so one warpgroup's softmax runs while the other's products run.
//    kIntraWarpgroupOverlap and kPingPong below turn each off (for the guard's tests).
//    The first runs as written at 128-key tiles and at head_dim 64: ptxas waits for P V
//    before the softmax when the K slot is released between them
//    (Traits::kReleaseKAfterSoftmax), as head_dim 128's 192-key tiles (non-causal above
//    1024 keys) still do. O is rescaled by a step's new maxima once its P V is done, out
//    of the warpgroups' turn (Traits::kRescaleAfterPV).
//  * Epilogue: O / rowsum in registers -> fp16/bf16 -> shared memory (stmatrix) ->
//    global memory by a TMA store, which clips rows past seq_q. At head_dim 64 each
//    warpgroup stores its 64 rows by itself (O has a buffer of its own there); else the
//    CTA stores O at once, from the V ring's space where O has no buffer of its own.
//
// Files, named as FlashAttention-3's hopper/ files are: this header holds the switches,
// the kernel configuration (Traits) and the host side; it includes, in order,
// named_barrier.hpp, utils.h (tensor helpers, warpgroup GEMMs), softmax.h, mask.h,
// tile_scheduler.hpp (the tile order), mainloop_fwd_sm90_tma_gmma_ws.hpp (the producer's
// TMA loads and the consumers' ping-pong) and epilogue_fwd.hpp.
//
// Causal masking is top-left aligned (torch SDPA's is_causal): query i sees keys j <= i.
// Limits: head_dim 64 or 128, fp16/bf16, seq_k >= 1 (the host returns zeros for 0);
// strides of Q, K, V and O multiples of 8 elements and 16-byte aligned base pointers
// (TMA's rules; binding.cpp copies anything else).
#pragma once

#include "flash_fwd.h"

// CuTe offers wgmma's N shapes that are not a multiple of 64 (176 keys: FlashAttention-3's
// head_dim 128 tiles) only with this switch; without it a 176-key Q K^T becomes eleven
// N=16 products (see the static_assert in Traits).
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/array.h>
#include <cutlass/cutlass.h>
#include <cutlass/fast_math.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <atomic>
#include <cmath>

// Tile shapes (rows of Q per CTA, keys per step); overridable with -D for tuning runs
// (nvcc splits -D values at commas, hence one macro per number).
#ifndef FLASH_SM90_D64_FULL_M
#define FLASH_SM90_D64_FULL_M 128
#endif
#ifndef FLASH_SM90_D64_FULL_N
#define FLASH_SM90_D64_FULL_N 192  // long key axes
#endif
#ifndef FLASH_SM90_D64_FULL_SHORT_N
#define FLASH_SM90_D64_FULL_SHORT_N 128  // seq_k <= FLASH_SM90_D64_SHORT_K
#endif
#ifndef FLASH_SM90_D64_SHORT_K
#define FLASH_SM90_D64_SHORT_K 1024
#endif
#ifndef FLASH_SM90_D64_CAUSAL_M
#define FLASH_SM90_D64_CAUSAL_M 128  // seq_q < FLASH_SM90_D64_CAUSAL_LONG_Q
#endif
// Long causal head_dim 64: FlashAttention-3's 192 rows (three consumer warpgroups) from
// this many queries on; below it the ragged last row block and the diagonal's masked
// steps cost 192 rows more than they save. H200, bf16, ratio to cuDNN with 128 / 192
// rows: S = 1024 0.97x / 1.13x, 1536 0.99x / 0.96x, 3072 1.00x / 0.94x, 8192 0.99x / 0.91x.
#ifndef FLASH_SM90_D64_CAUSAL_LONG_M
#define FLASH_SM90_D64_CAUSAL_LONG_M 192
#endif
#ifndef FLASH_SM90_D64_CAUSAL_LONG_Q
#define FLASH_SM90_D64_CAUSAL_LONG_Q 1536
#endif
#ifndef FLASH_SM90_D64_CAUSAL_N
#define FLASH_SM90_D64_CAUSAL_N 128
#endif
#ifndef FLASH_SM90_D128_FULL_N
#define FLASH_SM90_D128_FULL_N 192  // long key axes
#endif
#ifndef FLASH_SM90_D128_FULL_SHORT_N
#define FLASH_SM90_D128_FULL_SHORT_N 128  // seq_k <= FLASH_SM90_D128_SHORT_K
#endif
#ifndef FLASH_SM90_D128_SHORT_K
#define FLASH_SM90_D128_SHORT_K 1024
#endif
#ifndef FLASH_SM90_D128_CAUSAL_N
#define FLASH_SM90_D128_CAUSAL_N 128
#endif
#ifndef FLASH_SM90_CAUSAL_HEAVY_FIRST
#define FLASH_SM90_CAUSAL_HEAVY_FIRST 1
#endif
// Causal tiles handed out by an atomic counter (1) or by a static stride (0).
#ifndef FLASH_SM90_DYNAMIC_CAUSAL
#define FLASH_SM90_DYNAMIC_CAUSAL 1
#endif
// Head_dim 128 non-causal on a cluster of two CTAs (2) on neighbouring row blocks of one
// head, each loading half of every K and V tile and multicasting it to both (TMA
// multicast; FlashAttention-3's choice there), or one CTA alone (1). Only where the row
// blocks pair up (an even count); otherwise the one-CTA kernel runs. H100, ratio to
// cuDNN (docs/PERFORMANCE.md): (2,8,2048,128) 1.032x -> 0.996x (on 128-key tiles then),
// (4,32,4096,128) 1.006x -> 0.975x, 16k 0.96-0.97x -> 0.92-0.93x.
#ifndef FLASH_SM90_D128_CLUSTER
#define FLASH_SM90_D128_CLUSTER 2
#endif
// Q buffers: 2 lets the next tile's Q load while this tile ends (where it fits).
#ifndef FLASH_SM90_Q_STAGES
#define FLASH_SM90_Q_STAGES 2
#endif
// O stored per consumer warpgroup (1: each its own 64 rows, no wait for the others at a
// tile's end, where O has its own buffer) or by the CTA at once (0). Measured on an H100
// (docs/PERFORMANCE.md): 0.5-2% faster on head_dim 64 shapes, about 1.5% slower on
// head_dim 128 causal ones, both within a run-to-run spread of about 1%.
#ifndef FLASH_SM90_D64_WG_STORE
#define FLASH_SM90_D64_WG_STORE 1
#endif
#ifndef FLASH_SM90_D128_WG_STORE
#define FLASH_SM90_D128_WG_STORE 0
#endif
// A step's K slot released after its softmax (1) or once its Q K^T is done (0); see
// Traits::kReleaseKAfterSoftmax.
#ifndef FLASH_SM90_LATE_K_RELEASE
#define FLASH_SM90_LATE_K_RELEASE 1
#endif
// O rescaled once a step's P V is done (1) or just before the next one (0); see
// Traits::kRescaleAfterPV.
#ifndef FLASH_SM90_RESCALE_AFTER_PV
#define FLASH_SM90_RESCALE_AFTER_PV 1
#endif
// Non-causal 192-key tiles: the ragged last key block runs its products on 64 or 128
// keys where its keys fit there, as the tile's last step (1; Traits::kLastKeys), or on
// all 192, the rest masked, as the first (0). 192-key steps pad 4096 keys to 4224 and
// 2048 to 2112.
#ifndef FLASH_SM90_NARROW_LAST_BLOCK
#define FLASH_SM90_NARROW_LAST_BLOCK 1
#endif
// The next tile's Q prefetched into L2 once this tile's loads are issued (1), where Q has
// one buffer and so loads only as this tile ends: the load then reads L2, not DRAM. It
// pays where Q comes from DRAM (H100, ratio to cuDNN with the L2 flushed before each call,
// as triton's do_bench does: (2,8,8,2048,128) 1.012x -> 0.983x, (2,16,16,4097,128)
// 0.892x -> 0.873x); in back-to-back calls whose inputs stay in L2 it changes nothing
// (the guard's samples: 1.004x [0.998, 1.011] at (2,8,2048,128) without it).
#ifndef FLASH_SM90_PREFETCH_NEXT_Q
#define FLASH_SM90_PREFETCH_NEXT_Q 1
#endif
// Head_dim 64's non-causal 192-key tiles wait for and release their K and V slots on the
// ring's barriers directly (0) or through CUTLASS's pipeline class and its checks (1);
// see kRingChecks.
#ifndef FLASH_SM90_D64_RING_CHECKS
#define FLASH_SM90_D64_RING_CHECKS 0
#endif
// Q's, K's and V's shared-memory descriptors partitioned at the warpgroup's first thread
// (1: uniform registers, no R2UR in the step) or at each thread (0); see attend_tile.
// Both give every thread the same descriptors (tests/test_cuda_flash.py checks the
// partitions); 1 timed no faster on an H200 (docs/notes/cuda-kernel-measurements.md).
#ifndef FLASH_SM90_UNIFORM_DESCRIPTORS
#define FLASH_SM90_UNIFORM_DESCRIPTORS 0
#endif
#ifndef FLASH_SM90_STAGES
#define FLASH_SM90_STAGES 2
#endif
// K/V ring depth per head_dim. Head_dim 64's smaller tiles leave room for a third stage,
// which pays since causal tiles are handed out on demand and Q has two buffers (H100,
// ratio to cuDNN: (8,32,1024,64) causal 1.07x -> 0.97x, (4,16,2048,64) 1.07x -> 1.05x).
#ifndef FLASH_SM90_D64_STAGES
#define FLASH_SM90_D64_STAGES 3
#endif
#ifndef FLASH_SM90_D128_STAGES
#define FLASH_SM90_D128_STAGES FLASH_SM90_STAGES
#endif

namespace flash_sm90 {

using namespace cute;

// The two overlaps; a commit that sets one to false must show up as a regression.
constexpr bool kIntraWarpgroupOverlap = true;
constexpr bool kPingPong = true;

// ---- kernel configuration ----------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, typename Element_,
          int kClusterM_ = 1, int kLastKeys_ = kBlockN_>
struct Traits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Keys of the last (ragged) key block that its Q K^T and P V run on: kBlockN, or 64 or
  // 128 where all of that block's keys fall within them. Then that block is the tile's
  // last step instead of its first (non-causal only, with at least two key blocks). The
  // host picks it from seq_k, the same for every tile of a launch: no branch on it here.
  static constexpr int kLastKeys = kLastKeys_;
  static constexpr bool kNarrowLast = kLastKeys < kBlockN;
  static_assert((kLastKeys == kBlockN || kLastKeys % 64 == 0) && kLastKeys <= kBlockN);
  // CTAs per cluster (row blocks of one head sharing each K and V load by multicast).
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || kClusterM == 2);
  using ClusterShape = Shape<Int<kClusterM>, _1, _1>;
  using TmaLoadKV = std::conditional_t<kClusterM == 1, SM90_TMA_LOAD, SM90_TMA_LOAD_MULTICAST>;
  static constexpr int kConsumerWarpgroups = kBlockM / 64;
  static constexpr int kMmaThreads = kConsumerWarpgroups * 128;
  static constexpr int kThreads = kMmaThreads + 128;  // + the producer warpgroup
  static constexpr int kWarps = kThreads / 32;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3);
  // setmaxnreg: the producer gives its registers to the consumers. The totals stay within
  // the launch's allocation: two consumer warpgroups, 384 threads x 168 >= 128 x 24 +
  // 256 x 240 (or 128 x 32 + 256 x 232 at head_dim 64, whose producer spills at 24 with
  // a causal mask); three (192-row tiles), 512 threads x 128 = 128 x 32 + 384 x 160.
  // A cluster's producer with 128-key tiles (and two Q buffers) spills 4 bytes at 24;
  // its consumers fit in 232. With 192 keys the consumers need their 240.
  static constexpr int kProducerRegs =
      kConsumerWarpgroups == 2 && kHeadDim == 128 && !(kClusterM > 1 && kBlockN == 128) ? 24
                                                                                        : 32;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 3 ? 160 : kProducerRegs == 24 ? 240 : 232;

  using TileShape = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;
  using AtomLayout = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  // S = Q K^T: A (Q) and B (K) from shared memory, both K-major (head_dim contiguous).
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileShape>(), AtomLayout{}));
  static_assert(size<1>(typename TiledMmaQK::AtomShape_MNK{}) == kBlockN,
                "S = Q K^T is one wgmma per warpgroup and k-step: a key tile must be a wgmma N");
  // O = P V: A (P) from registers, B (V) from shared memory, MN-major (V is [key][dim]).
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, decltype(select<0, 2, 1>(TileShape{})),
                           GMMA::Major::K, GMMA::Major::MN>(),
      AtomLayout{}));

  // head_dim * 2 bytes is a multiple of 128: the 128-byte swizzle for every tile.
  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, select<0, 2>(TileShape{})));
  using SmemLayoutK = decltype(tile_to_shape(
      SmemAtom{}, make_shape(Int<kBlockN>{}, Int<kHeadDim>{}, Int<kStages>{})));
  using SmemLayoutV = SmemLayoutK;
  // V seen as (dim, key, stage): the same bytes, transposed view for the P V product.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{},
      make_layout(make_shape(Int<kHeadDim>{}, Int<kBlockN>{}, Int<kStages>{}),
                  make_stride(Int<kBlockN>{}, _1{}, Int<kBlockN * kHeadDim>{}))));
  using SmemLayoutO = SmemLayoutQ;
  // One consumer warpgroup's 64 rows of O, and its P V product alone (the same
  // accumulator layout per thread as its share of TiledMmaPV).
  using SmemLayoutOWarpgroup =
      decltype(tile_to_shape(SmemAtom{}, Shape<_64, Int<kHeadDim>>{}));
  using TiledMmaPVWarpgroup = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>()));

  // Where a step releases its K slot: after the softmax (so that the P V product in
  // flight is waited for only after it, as the intra-warpgroup overlap wants; see the
  // step in attend_tile), or as soon as Q K^T is done. At head_dim 128's 192-key tiles
  // the overlap spills 4 bytes on clusters (S of the next step, P and O live at once),
  // so those keep the early one, and ptxas waits for P V before their softmax: no
  // intra-warpgroup overlap there (tried with the spill: no faster at 4k and 16k,
  // docs/PERFORMANCE.md). Head_dim 64's 192-key tiles have the registers.
  // FlashAttention-3's 176-key tiles of head_dim 128 (FLASH_SM90_D128_FULL_N=176) have
  // the registers too: the softmax runs under P V there, yet 2-4% slower than the
  // 192-key defaults (docs/notes/cuda-kernel-measurements.md).
  static constexpr bool kReleaseKAfterSoftmax =
      FLASH_SM90_LATE_K_RELEASE && (kBlockN <= 176 || kHeadDim == 64);
  // Where O is rescaled by a step's new row maxima: once the step's P V product is done
  // (1: out of the warpgroups' turn at the tensor cores, so the other warpgroup's turn
  // comes sooner), or just before the next P V is issued, inside the turn (0, as
  // FlashAttention-3). Three consumer warpgroups (160 registers each) keep the latter:
  // the former spills there.
  static constexpr bool kRescaleAfterPV =
      FLASH_SM90_RESCALE_AFTER_PV && kConsumerWarpgroups == 2;
  // S = Q K^T on the last block's kLastKeys keys.
  using TiledMmaQKLast = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float,
                           Shape<Int<kBlockM>, Int<kLastKeys>, Int<kHeadDim>>>(),
      AtomLayout{}));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename cutlass::PipelineState<kStages>;

  // 1024-byte aligned: the 128-byte swizzle repeats every 1024 bytes, and TMA and the
  // layouts above assume each buffer starts at a repeat.
  using SmemQ = cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024>;
  using SmemKV = cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024>;
  using SmemO = cute::array_aligned<Element, cute::cosize_v<SmemLayoutO>, 1024>;
  struct Barriers {
    cutlass::arch::ClusterTransactionBarrier barrier_q[2];  // one per Q buffer
    cutlass::arch::ClusterBarrier barrier_o;
    typename Pipeline::SharedStorage pipeline_k;
    typename Pipeline::SharedStorage pipeline_v;
    int tile_index[2];  // the tile whose Q is in each buffer (>= total_tiles: stop)
  };
  static constexpr bool fits(int q_buffers, bool separate_o) {
    return q_buffers * sizeof(SmemQ) + 2 * sizeof(SmemKV) + (separate_o ? sizeof(SmemO) : 0) +
               sizeof(Barriers) + 1024 <=
           227 * 1024;
  }
  // O gets its own buffer where it fits, so that the next tile's V never waits for this
  // tile's O store; else O is staged in the V ring's space (barrier_o orders the two).
  static constexpr bool kSeparateO = fits(1, true);
  static constexpr int kQStages = FLASH_SM90_Q_STAGES >= 2 && fits(2, kSeparateO) ? 2 : 1;
  // Each consumer warpgroup writes and TMA-stores its own 64 rows of O, waiting only for
  // its own previous store: the warpgroups keep their ping-pong offset from one tile to
  // the next instead of meeting at every tile's end. Needs O's own buffer (else every
  // warpgroup must be done reading V before any writes O there).
  static constexpr bool kWarpgroupStore =
      (kHeadDim == 64 ? FLASH_SM90_D64_WG_STORE : FLASH_SM90_D128_WG_STORE) && kSeparateO;
  struct StorageSeparateO {
    SmemQ smem_q[kQStages];
    SmemKV smem_k;
    SmemKV smem_v;
    SmemO smem_o;
    Barriers bars;
  };
  struct StorageSharedO {
    SmemQ smem_q[kQStages];
    SmemKV smem_k;
    union {
      SmemKV smem_v;
      SmemO smem_o;
    };
    Barriers bars;
  };
  using SharedStorage = std::conditional_t<kSeparateO, StorageSeparateO, StorageSharedO>;

  using ShapeQKV = Shape<int32_t, int32_t, int32_t, int32_t>;  // (seq, dim, head, batch)
  using StrideQKV = Stride<int64_t, _1, int64_t, int64_t>;
  using TmaQ = decltype(make_tma_copy(
      SM90_TMA_LOAD{},
      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideQKV{}),
      SmemLayoutQ{}, select<0, 2>(TileShape{}), _1{}));
  using TmaKV = decltype(make_tma_copy(
      TmaLoadKV{},
      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideQKV{}),
      take<0, 2>(SmemLayoutK{}), select<1, 2>(TileShape{}), Int<kClusterM>{}));
  using TmaO = decltype(make_tma_copy(
      SM90_TMA_STORE{},
      make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), ShapeQKV{}, StrideQKV{}),
      std::conditional_t<kWarpgroupStore, SmemLayoutOWarpgroup, SmemLayoutO>{},
      std::conditional_t<kWarpgroupStore, Shape<_64, Int<kHeadDim>>,
                         decltype(select<0, 2>(TileShape{}))>{},
      _1{}));

  static constexpr uint32_t kBytesQ = cute::cosize_v<SmemLayoutQ> * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);
};

template <typename T>
struct KernelParams {
  typename T::ShapeQKV shape_q, shape_k;
  typename T::TmaQ tma_q;
  typename T::TmaKV tma_k, tma_v;
  typename T::TmaO tma_o;
  float scale_log2;
  int num_m_blocks;
  int heads;
  int heads_per_kv;  // heads / heads_kv
  int total_tiles;
  int group_bh;     // causal tile order: (batch, head) pairs per L2-sized group
  int first_group;  // pairs in the first group (the remainder; the rest hold group_bh)
  int* tile_counter;  // {next, done}, zero at launch; nullptr: the static stride
  cutlass::FastDivmod m_block_divmod, head_divmod;
};

}  // namespace flash_sm90

#include "named_barrier.hpp"
#include "utils.h"
#include "softmax.h"
#include "mask.h"
#include "tile_scheduler.hpp"
#include "mainloop_fwd_sm90_tma_gmma_ws.hpp"
#include "epilogue_fwd.hpp"

namespace flash_sm90 {

using namespace cute;

// ---- host side -----------------------------------------------------------------------
// Calls use(config) with a launch config of `grid` CTAs in clusters of T::kClusterM (the
// config points at its cluster attribute, which lives only during the call).
template <typename T, typename Use>
cudaError_t with_cluster_config(int grid, int smem_bytes, cudaStream_t stream, Use&& use) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = T::kClusterM;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid, 1, 1);
  config.blockDim = dim3(T::kThreads, 1, 1);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return use(config);
}

template <typename T, bool kCausal>
cudaError_t launch(const FlashFwdParams& fp, cudaStream_t stream) {
  using Element = typename T::Element;
  using StrideQKV = typename T::StrideQKV;
  typename T::ShapeQKV shape_q{fp.seq_q, fp.head_dim, fp.heads, fp.batch};
  typename T::ShapeQKV shape_k{fp.seq_k, fp.head_dim, fp.heads_kv, fp.batch};
  auto q = make_tensor(make_gmem_ptr(static_cast<Element const*>(fp.q)), shape_q,
                       StrideQKV{fp.q_row_stride, _1{}, fp.q_head_stride, fp.q_batch_stride});
  auto k = make_tensor(make_gmem_ptr(static_cast<Element const*>(fp.k)), shape_k,
                       StrideQKV{fp.k_row_stride, _1{}, fp.k_head_stride, fp.k_batch_stride});
  auto v = make_tensor(make_gmem_ptr(static_cast<Element const*>(fp.v)), shape_k,
                       StrideQKV{fp.v_row_stride, _1{}, fp.v_head_stride, fp.v_batch_stride});
  auto o = make_tensor(make_gmem_ptr(static_cast<Element*>(fp.o)), shape_q,
                       StrideQKV{fp.o_row_stride, _1{}, fp.o_head_stride, fp.o_batch_stride});
  using TileShape = typename T::TileShape;
  KernelParams<T> p{
      shape_q,
      shape_k,
      make_tma_copy(SM90_TMA_LOAD{}, q, typename T::SmemLayoutQ{}, select<0, 2>(TileShape{}), _1{}),
      make_tma_copy(typename T::TmaLoadKV{}, k, take<0, 2>(typename T::SmemLayoutK{}),
                    select<1, 2>(TileShape{}), Int<T::kClusterM>{}),
      make_tma_copy(typename T::TmaLoadKV{}, v, take<0, 2>(typename T::SmemLayoutV{}),
                    select<1, 2>(TileShape{}), Int<T::kClusterM>{}),
      make_tma_copy(SM90_TMA_STORE{}, o,
                    std::conditional_t<T::kWarpgroupStore, typename T::SmemLayoutOWarpgroup,
                                       typename T::SmemLayoutO>{},
                    std::conditional_t<T::kWarpgroupStore, Shape<_64, Int<T::kHeadDim>>,
                                       decltype(select<0, 2>(TileShape{}))>{},
                    _1{}),
      fp.scale_log2,
      cute::ceil_div(fp.seq_q, T::kBlockM),
      fp.heads,
      fp.heads / fp.heads_kv,
      0,
      1,
      1,
      nullptr,
      {},
      {}};
  const long long tiles = static_cast<long long>(p.num_m_blocks) * fp.heads * fp.batch;
  // Tile indices run up to total_tiles + the grid (the stop sent to the consumers).
  if (tiles > INT32_MAX / 2) return cudaErrorInvalidValue;
  p.total_tiles = static_cast<int>(tiles);
  p.m_block_divmod = cutlass::FastDivmod(p.num_m_blocks);
  p.head_divmod = cutlass::FastDivmod(fp.heads);

  auto kernel = flash_fwd_sm90_kernel<T, kCausal>;
  constexpr int kSmemBytes = static_cast<int>(sizeof(typename T::SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory beyond Hopper's 227 KB per block");
  // Per device, once: the kernel's shared-memory limit, SM count and L2 size (each
  // query costs microseconds, as much as a small problem's whole kernel).
  struct DeviceInfo {
    std::atomic<bool> ready{false};
    int sms = 0, l2_bytes = 0;
    int clusters = 0;  // clusters of kClusterM CTAs that fit on the GPU at once
  };
  static DeviceInfo devices[64];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 0 || device >= 64) return cudaErrorInvalidDevice;
  DeviceInfo& info = devices[device];
  if (!info.ready.load(std::memory_order_acquire)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&info.l2_bytes, cudaDevAttrL2CacheSize, device);
    if constexpr (T::kClusterM > 1) {
      // Not every SM can pair with another in its GPC: ask how many clusters fit.
      if (err == cudaSuccess) {
        err = with_cluster_config<T>(info.sms, kSmemBytes, stream, [&](const cudaLaunchConfig_t& c) {
          return cudaOccupancyMaxActiveClusters(&info.clusters, kernel, &c);
        });
      }
      if (err == cudaSuccess && info.clusters < 1) err = cudaErrorInvalidConfiguration;
    }
    if (err != cudaSuccess) return err;
    info.ready.store(true, std::memory_order_release);  // a race sets the same values twice
  }
  const int sms = info.sms;
  const int l2_bytes = info.l2_bytes;
  // K and V of one query head (shared by heads_per_kv of them under GQA).
  const double kv_bytes = 2.0 * fp.seq_k * fp.head_dim * sizeof(Element) / p.heads_per_kv;
  const double pairs = (l2_bytes / 2) / (kv_bytes > 1.0 ? kv_bytes : 1.0);
  const int bh_total = fp.heads * fp.batch;
  p.group_bh = pairs < 1.0 ? 1 : (pairs > bh_total ? bh_total : static_cast<int>(pairs));
  p.first_group = bh_total - (bh_total - 1) / p.group_bh * p.group_bh;
  if constexpr (T::kClusterM > 1) {
    // Non-causal, an even number of row blocks (launch_full_tiles checks): with the static
    // stride over an even grid, the CTAs of a cluster take row blocks 2i and 2i + 1 of
    // one head, with the same key range, and the same number of tiles.
    static_assert(!kCausal, "clusters take non-causal tiles only");
    const int slots = info.clusters * T::kClusterM;
    const int grid = p.total_tiles < slots ? p.total_tiles : slots;
    return with_cluster_config<T>(grid, kSmemBytes, stream, [&](const cudaLaunchConfig_t& c) {
      return cudaLaunchKernelEx(&c, kernel, p);
    });
  } else {
    const int grid = p.total_tiles < sms ? p.total_tiles : sms;
    if (kCausal && FLASH_SM90_DYNAMIC_CAUSAL && p.total_tiles > grid) {
      p.tile_counter = flash_fwd_sm90_tile_counter(device, stream);  // nullptr: static
    }
    kernel<<<grid, T::kThreads, kSmemBytes, stream>>>(p);
    return cudaGetLastError();
  }
}

// Non-causal with kBlockN keys per step: calls launch_with(Int<keys>) with the key width
// of the last (ragged) key block's products, Traits::kLastKeys: at 192-key tiles, 64 or
// 128 where that block's keys fit there and the tile has another block.
template <int kBlockN, typename Launch>
cudaError_t with_last_keys(int seq_k, Launch&& launch_with) {
  if constexpr (FLASH_SM90_NARROW_LAST_BLOCK && kBlockN == 192) {
    const int last_keys = seq_k - (seq_k - 1) / kBlockN * kBlockN;  // 1 .. kBlockN
    if (seq_k > kBlockN && last_keys <= 64) return launch_with(Int<64>{});
    if (seq_k > kBlockN && last_keys <= 128) return launch_with(Int<128>{});
  }
  return launch_with(Int<kBlockN>{});
}

// Head_dim 128 non-causal with kBlockN keys per step: on a cluster of two CTAs where
// the row blocks pair up, else one CTA. Where O shares the V ring's space, the cluster's
// O barrier (one arrival per CTA and tile) needs every tile to have more key blocks than
// the ring has stages (see attend_tile), else one CTA runs.
template <int kHeadDim, int kBlockN, int kStages, typename Element>
cudaError_t launch_full_tiles(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr int kCluster = FLASH_SM90_D128_CLUSTER;
  return with_last_keys<kBlockN>(p.seq_k, [&](auto last_keys) {
    constexpr int kLast = decltype(last_keys)::value;
    using Clustered = Traits<kHeadDim, 128, kBlockN, kStages, Element, kCluster, kLast>;
    using Single = Traits<kHeadDim, 128, kBlockN, kStages, Element, 1, kLast>;
    const bool paired = kCluster > 1 && cute::ceil_div(p.seq_q, 128) % kCluster == 0 &&
                        (Clustered::kSeparateO || cute::ceil_div(p.seq_k, kBlockN) > kStages);
    return paired ? launch<Clustered, false>(p, stream) : launch<Single, false>(p, stream);
  });
}

// Non-causal: the key tile by seq_k (head_dim 64 on one CTA, 128 as launch_full_tiles picks).
template <int kHeadDim, int kStages, typename Element>
cudaError_t launch_full(const FlashFwdParams& p, cudaStream_t stream) {
  if constexpr (kHeadDim == 64) {
    constexpr int kBlockM = FLASH_SM90_D64_FULL_M;
    auto launch_keys = [&](auto block_n) {  // Int<keys per step>
      constexpr int kBlockN = decltype(block_n)::value;
      return with_last_keys<kBlockN>(p.seq_k, [&](auto last_keys) {
        constexpr int kLast = decltype(last_keys)::value;
        return launch<Traits<64, kBlockM, kBlockN, kStages, Element, 1, kLast>, false>(p, stream);
      });
    };
    return p.seq_k <= FLASH_SM90_D64_SHORT_K ? launch_keys(Int<FLASH_SM90_D64_FULL_SHORT_N>{})
                                             : launch_keys(Int<FLASH_SM90_D64_FULL_N>{});
  } else {
    if (p.seq_k <= FLASH_SM90_D128_SHORT_K) {
      return launch_full_tiles<kHeadDim, FLASH_SM90_D128_FULL_SHORT_N, kStages, Element>(p, stream);
    }
    return launch_full_tiles<kHeadDim, FLASH_SM90_D128_FULL_N, kStages, Element>(p, stream);
  }
}

}  // namespace flash_sm90

// One (dtype, head_dim) pair, causal or not. Each flash_fwd_sm90_*.cu instantiates one,
// so that the extension build compiles the four in parallel.
#define FLASH_SM90_INSTANTIATE(ELEMENT, HEAD_DIM, NAME)                                    \
  cudaError_t NAME(const FlashFwdParams& p, cudaStream_t stream) {                         \
    using namespace flash_sm90;                                                            \
    if constexpr (HEAD_DIM == 64) {                                                        \
      constexpr int S = FLASH_SM90_D64_STAGES;                                             \
      if (!p.causal) return launch_full<64, S, ELEMENT>(p, stream);                          \
      constexpr int N = FLASH_SM90_D64_CAUSAL_N;                                             \
      return p.seq_q >= FLASH_SM90_D64_CAUSAL_LONG_Q                                         \
                 ? launch<Traits<64, FLASH_SM90_D64_CAUSAL_LONG_M, N, S, ELEMENT>, true>(p, stream) \
                 : launch<Traits<64, FLASH_SM90_D64_CAUSAL_M, N, S, ELEMENT>, true>(p, stream);  \
    } else {                                                                               \
      constexpr int S = FLASH_SM90_D128_STAGES;                                            \
      return p.causal                                                                      \
                 ? launch<Traits<128, 128, FLASH_SM90_D128_CAUSAL_N, S, ELEMENT>, true>(p, stream)  \
             : launch_full<128, S, ELEMENT>(p, stream);                                        \
    }                                                                                      \
  }
