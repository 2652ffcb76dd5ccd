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
// Causal masking is top-left aligned (torch SDPA's is_causal): query i sees keys j <= i.
// Limits: head_dim 64 or 128, fp16/bf16, seq_k >= 1 (the host returns zeros for 0);
// strides of Q, K, V and O multiples of 8 elements and 16-byte aligned base pointers
// (TMA's rules; binding.cpp copies anything else).
#pragma once

#include "flash_fwd.h"

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
#define FLASH_SM90_D64_CAUSAL_M 128
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

// ---- named barriers (ids 1..15; 0 is __syncthreads) --------------------------------
enum class Bar : int {
  QueryEmpty = 1,  // Q buffer 0 (buffer 1: QueryEmptySecond)
  OutputReady = 2,
  OutputWritten = 3,
  WarpgroupBase = 4,  // + 1 .. 3: the ping-pong turns
  QueryEmptySecond = 8,
  OutputWarpgroup = 9,  // + 0 .. 2: one warpgroup's O slab (per-warpgroup stores)
};
CUTLASS_DEVICE int query_empty_bar(int q_stage) {
  return q_stage == 0 ? int(Bar::QueryEmpty) : int(Bar::QueryEmptySecond);
}

// Keeps the compiler from moving memory accesses across it: CUTLASS's mbarrier wait and
// arrive are asm without a memory clobber, and the tile slot is read and written next to them.
CUTLASS_DEVICE void compiler_fence() { asm volatile("" ::: "memory"); }

// The thread's index among the consumers (threadIdx.x - 128), read from %tid.x anew:
// volatile, so that the compiler neither reuses nor keeps an earlier read.
CUTLASS_DEVICE int consumer_thread_index() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid - 128;
}

CUTLASS_DEVICE void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
CUTLASS_DEVICE void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

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
  static_assert(kLastKeys % 64 == 0 && kLastKeys <= kBlockN);
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
  static constexpr bool kReleaseKAfterSoftmax =
      FLASH_SM90_LATE_K_RELEASE && (kBlockN == 128 || kHeadDim == 64);
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

// ---- tiles ---------------------------------------------------------------------------
struct Tile {
  int m_block, head, batch;
};

template <typename T>
CUTLASS_DEVICE Tile tile_of(KernelParams<T> const& p, int index, bool causal) {
  int m_block, head;
#if FLASH_SM90_CAUSAL_HEAVY_FIRST
  if (causal) {
    // Causal: the last query blocks see the most keys. Within a group of (batch, head)
    // pairs whose K and V fit in half the L2, every pair's last block goes first, so the
    // light blocks fill the grid's tail (longest processing time first) while the
    // group's keys stay in L2. The smaller group, if any, goes first: last, its heavy
    // blocks would start when too little work is left to balance them.
    const int first_tiles = p.first_group * p.num_m_blocks;
    int first_bh, group_size, rest;
    if (index < first_tiles) {
      first_bh = 0;
      group_size = p.first_group;
      rest = index;
    } else {
      const int group_tiles = p.group_bh * p.num_m_blocks;
      const int group = (index - first_tiles) / group_tiles;
      first_bh = p.first_group + group * p.group_bh;
      group_size = p.group_bh;
      rest = index - first_tiles - group * group_tiles;
    }
    const int m_from_end = rest / group_size;
    const int bh = first_bh + rest - m_from_end * group_size;
    const int batch = p.head_divmod.divmod(head, bh);
    return {p.num_m_blocks - 1 - m_from_end, head, batch};
  }
#endif
  const int batch = p.head_divmod.divmod(head, p.m_block_divmod.divmod(m_block, index));
  if (causal) m_block = p.num_m_blocks - 1 - m_block;
  return {m_block, head, batch};
}

template <typename T, bool kCausal>
CUTLASS_DEVICE int n_block_count(KernelParams<T> const& p, int m_block) {
  constexpr int kBlockN = T::kBlockN;
  const int seq_k = get<0>(p.shape_k);
  int n = (seq_k + kBlockN - 1) / kBlockN;
  if constexpr (kCausal) n = min(n, ((m_block + 1) * T::kBlockM + kBlockN - 1) / kBlockN);
  return n;
}

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
  auto thr_qk = mma_qk.get_thread_slice(thread);
  auto thr_pv = mma_pv.get_thread_slice(thread);
  Tensor tSrQ = thr_qk.partition_fragment_A(sQ);
  Tensor tSrK = thr_qk.partition_fragment_B(sK);
  Tensor tOrV = thr_pv.partition_fragment_B(sVt);
  auto wait = [](auto& pipe, auto& state) {
    auto token = pipe.consumer_try_wait(state);
    pipe.consumer_wait(state, token);
  };

  const int seq_k = get<0>(p.shape_k);
  // The steps left after this one, counted down; also the key block of the step it
  // counts, except with a narrow last block (Traits::kLastKeys: blocks n_block - 1, then
  // the ragged one last).
  int n_block = n_blocks - 1;
  static_assert(!(kCausal && T::kNarrowLast));

  Tensor tSrS = partition_fragment_C(mma_qk, select<0, 1>(TileShape{}));
  wait(pipe_k, read_k);
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
  pipe_k.consumer_release(read_k);
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
    wait(pipe_k, read_k);
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
    wait(pipe_v, read_v);
    gemm<false, -1>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
    warpgroup_turn_pass<T>();
    warpgroup_wait<1>();
    if constexpr (!T::kReleaseKAfterSoftmax) {
      // ptxas waits for P V at this release in a full step (see kReleaseKAfterSoftmax); in
      // the narrow one it moved the release past the softmax, kept P V in flight and
      // spilled: the wait is written out there.
      if constexpr (kKeys < kBlockN) warpgroup_wait<0>();
      pipe_k.consumer_release(read_k);
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
    if constexpr (T::kReleaseKAfterSoftmax) pipe_k.consumer_release(read_k);
    warpgroup_wait<0>();
    pipe_v.consumer_release(read_v);
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
  wait(pipe_v, read_v);
  // P's columns past kLastKeys (converted from S registers a narrow Q K^T never wrote)
  // are not read: the product takes kLastKeys / 16 k-blocks.
  gemm<false, -1, T::kLastKeys / 16>(mma_pv, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
  softmax.finalize(rescale);
  warpgroup_wait<0>();
  pipe_v.consumer_release(read_v);
  ++read_v;
  SM::rescale_o(tOrO, rescale);
}

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
      return p.causal ? launch<Traits<64, FLASH_SM90_D64_CAUSAL_M, FLASH_SM90_D64_CAUSAL_N, S, ELEMENT>, true>(p, stream) \
                      : launch_full<64, S, ELEMENT>(p, stream);                              \
    } else {                                                                               \
      constexpr int S = FLASH_SM90_D128_STAGES;                                            \
      return p.causal                                                                      \
                 ? launch<Traits<128, 128, FLASH_SM90_D128_CAUSAL_N, S, ELEMENT>, true>(p, stream)  \
             : launch_full<128, S, ELEMENT>(p, stream);                                        \
    }                                                                                      \
  }
