// FlashAttention-2 forward for fp16 and bf16 on sm_80 and newer (mma.sync tensor cores).
//
// Algorithm (Dao, "FlashAttention-2", 2023): one thread block owns BLOCK_M query rows
// of one (batch, head); each warp owns 16 of those rows and keeps its Q tile and its
// output accumulator in registers for the whole kernel. The block streams over the key
// axis in tiles of BLOCK_N keys; K and V tiles go global -> shared memory with 16-byte
// cp.async, double-buffered (tile n+1 is in flight while tile n is used). Per tile:
//   S = Q K^T                     (mma.m16n8k16, fp32 accumulators)
//   S *= scale * log2(e), mask    (keys past seq_k; causal keys j > i)
//   online softmax in fp32:  m_new = max(m, rowmax S);  P = exp2(S - m_new);
//                            l = l * exp2(m - m_new) + rowsum P;  O *= exp2(m - m_new)
//   O += P V                      (P re-used from the S accumulators, see below)
// and at the end O /= l. Causal masking is top-left aligned, as torch SDPA's
// is_causal: query i sees keys j <= i whatever seq_q and seq_k are; key tiles that
// are masked for every row of the block are never loaded.
//
// Limits: head_dim 64 or 128; fp16/bf16 in, same dtype out; no dropout, no LSE output,
// no backward. The tile sizes below were chosen from the FlashAttention-2 defaults for
// mma.sync kernels, not yet tuned on our GPUs (benchmarks/bench_cuda_flash.py times
// them against torch SDPA on the suite shapes).
//
// Credits: the register re-use of S as the A operand of P V, the max/exp2 online
// softmax and the cp.async double buffer follow FlashAttention-2 (Tri Dao) and the
// PTX ISA's description of mma.m16n8k16 and ldmatrix.
//
// ---------------------------------------------------------------------------------
// Fragment layouts of mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"). In a warp, lane = 0..31,
//   g = lane / 4  ("groupID", 0..7)     c = lane % 4  ("threadID_in_group", 0..3)
// A registers hold two 16-bit values each, the lower column in the low half.
//
//   A (16x16, row-major, 4 regs)        B (16x8, "col-major" = K x N, 2 regs)
//     a[0] = A[g    ][2c .. 2c+1]         b[0] = B[2c     .. 2c+1][g]
//     a[1] = A[g + 8][2c .. 2c+1]         b[1] = B[2c + 8 .. 2c+9][g]
//     a[2] = A[g    ][2c+8 .. 2c+9]
//     a[3] = A[g + 8][2c+8 .. 2c+9]     C/D (16x8, fp32, 4 regs)
//                                         d[0], d[1] = C[g    ][2c], C[g    ][2c+1]
//                                         d[2], d[3] = C[g + 8][2c], C[g + 8][2c+1]
//
// ldmatrix.m8n8.x4.b16: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes
// each) of matrix i; register r[i] of lane t receives row t/4, elements 2(t%4) and
// 2(t%4)+1 of matrix i. With .trans lane t receives instead elements [2(t%4)][t/4]
// and [2(t%4)+1][t/4] (row, column of the matrix as stored), i.e. the transpose.
//
// How each operand is obtained here:
//  * Q (A of S = Q K^T, A[m][k] = Q[row m][dim k]): loaded once from global memory
//    straight into the a[] layout (32-bit loads; Q is read once per block, so no
//    shared-memory staging). qf[kk] covers dims 16kk .. 16kk+15.
//  * K (B of S = Q K^T, B[k][n] = K[key n][dim k]): sK is stored [key][dim]; b[0] for
//    key n = g needs K[g][2c .. 2c+1], which is what plain ldmatrix gives for the 8x8
//    matrix "keys 8j..8j+7 x dims 8q..8q+7". One ldmatrix.x4 takes dims 32s..32s+31
//    of key tile j: r0,r1 = b[0],b[1] of k-step 2s, r2,r3 = b[0],b[1] of k-step 2s+1.
//  * P (A of O = P V, A[m][k] = P[row m][key k]): S n-tiles 2t and 2t+1 hold keys
//    16t..16t+7 and 16t+8..16t+15, and the C layout (rows g, g+8; cols 2c, 2c+1) is
//    the A layout's, so  a[0] = S[2t][0,1]  a[1] = S[2t][2,3]
//                        a[2] = S[2t+1][0,1]  a[3] = S[2t+1][2,3]   (packed to 16 bit).
//  * V (B of O = P V, B[k][n] = V[key k][dim n]): b[0] for dim n = g needs V[2c][g]
//    and V[2c+1][g], two different rows of sV ([key][dim]), so ldmatrix.trans. Matrix
//    i of one .x4 is keys 16t + 8(i&1) .. +7 x dims 8(2p + (i>>1)) .. +7, giving
//    r0,r1 = b[0],b[1] of dim tile 2p and r2,r3 = b[0],b[1] of dim tile 2p+1.
//  * O (C of O = P V): o[d] is the 16x8 tile of dims 8d .. 8d+7; rows g and g+8.
//
// Shared memory: each K/V row is padded by 8 elements (16 bytes), so the 8 row
// addresses of one ldmatrix phase are (HEAD_DIM+8)*2 bytes apart = 16 bytes apart
// modulo 128: 8 distinct 16-byte bank groups, no bank conflict. (An XOR swizzle would
// save the 6% of padding; padding is simpler to get right without a GPU to test on.)
// ---------------------------------------------------------------------------------

#include "flash_fwd.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace {

// ---- tile configurations ---------------------------------------------------------
// BLOCK_M = 16 * WARPS (each warp owns 16 query rows). Untuned starting points:
//   hd 64 : 4 warps, 64 x 64 tiles, 36 KB shared memory (2 stages of K and V);
//           ptxas (nvcc 13.0, sm_90a): 164-168 registers, no spills -> 3 blocks/SM.
//   hd 128: 8 warps, 128 x 64 tiles, 68 KB shared memory; 220-230 registers, no
//           spills -> 1 block (8 warps) per SM. BLOCK_M 128 halves the K/V traffic
//           per query row against BLOCK_M 64 at the same warps per SM.
template <int HEAD_DIM>
struct TileConfig;
template <>
struct TileConfig<64> {
  static constexpr int kWarps = 4;
  static constexpr int kBlockN = 64;
};
template <>
struct TileConfig<128> {
  static constexpr int kWarps = 8;
  static constexpr int kBlockN = 64;
};

// ---- dtype-specific pieces --------------------------------------------------------
template <typename T>
struct DType;

template <>
struct DType<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
    uint32_t r;
    memcpy(&r, &h, sizeof(r));
    return r;
  }
  // D = A * B + D, fp32 accumulate.
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct DType<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    uint32_t r;
    memcpy(&r, &h, sizeof(r));
    return r;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- PTX wrappers ------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte global -> shared copy; when !valid nothing is read and the 16 bytes are
// zero-filled (src-size 0), so rows past seq_k hold zeros, never stale data.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most N of this thread's committed groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(smem_row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(smem_row)));
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int HEAD_DIM>
constexpr int smem_bytes() {
  // 2 stages x (K + V) x BLOCK_N rows x (HEAD_DIM + 8 padding) x 2 bytes
  return 2 * 2 * TileConfig<HEAD_DIM>::kBlockN * (HEAD_DIM + 8) * 2;
}

// ---- the kernel --------------------------------------------------------------------
template <typename T, int HEAD_DIM, bool CAUSAL>
__global__ void __launch_bounds__(TileConfig<HEAD_DIM>::kWarps * 32)
    flash_fwd_kernel(const FlashFwdParams p) {
  constexpr int kWarps = TileConfig<HEAD_DIM>::kWarps;
  constexpr int kThreads = kWarps * 32;
  constexpr int kBlockM = 16 * kWarps;
  constexpr int kBlockN = TileConfig<HEAD_DIM>::kBlockN;
  constexpr int kStride = HEAD_DIM + 8;            // shared row stride, elements
  constexpr int kTile = kBlockN * kStride;         // elements of one K or V stage
  constexpr int kKSteps = HEAD_DIM / 16;           // k-steps of Q K^T
  constexpr int kSTiles = kBlockN / 8;             // n-tiles of S
  constexpr int kOTiles = HEAD_DIM / 8;            // n-tiles of O
  constexpr int kChunksPerRow = HEAD_DIM / 8;      // 16-byte chunks per K/V row
  constexpr int kChunks = kBlockN * kChunksPerRow;
  static_assert(HEAD_DIM % 32 == 0, "ldmatrix.x4 on K takes 32 dims at a time");
  static_assert(kBlockN % 16 == 0, "P V takes 16 keys per k-step");
  static_assert(kChunks % kThreads == 0, "each thread copies the same number of chunks");
  constexpr float kNegInf = -__builtin_huge_valf();

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // [2 stages][kBlockN][kStride]
  T* sV = sK + 2 * kTile;                  // [2 stages][kBlockN][kStride]

  // Causal: the last query blocks have the most key tiles, so start them first.
  const int m_block = CAUSAL ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int head_kv = head / (p.heads / p.heads_kv);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int c = lane % 4;
  const int m0 = m_block * kBlockM;
  const int row0 = m0 + warp * 16 + g;  // this thread's two rows: row0 and row0 + 8
  const int row1 = row0 + 8;

  const T* q = static_cast<const T*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride;
  const T* k =
      static_cast<const T*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  const T* v =
      static_cast<const T*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;
  T* o = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;

  // Q fragments, straight from global memory into the A layout (rows past seq_q: 0).
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = (i & 1) ? row1 : row0;  // a[1], a[3]: row g + 8
      const int col = kk * 16 + 2 * c + (i >> 1) * 8;  // a[2], a[3]: cols + 8
      qf[kk][i] = row < p.seq_q ? *reinterpret_cast<const uint32_t*>(
                                      q + static_cast<int64_t>(row) * p.q_row_stride + col)
                                : 0u;
    }
  }

  // Copy key tile n_block into stage `stage`: thread i takes 16-byte chunks i,
  // i + kThreads, ...; consecutive threads read consecutive chunks of a row (coalesced).
  auto load_kv = [&](int n_block, int stage) {
    const int n0 = n_block * kBlockN;
#pragma unroll
    for (int it = 0; it < kChunks / kThreads; ++it) {
      const int idx = it * kThreads + static_cast<int>(threadIdx.x);
      const int r = idx / kChunksPerRow;
      const int col = (idx % kChunksPerRow) * 8;
      const bool valid = n0 + r < p.seq_k;
      const int64_t key = valid ? n0 + r : 0;  // keep the address in bounds when !valid
      cp_async_16(sK + stage * kTile + r * kStride + col, k + key * p.k_row_stride + col, valid);
      cp_async_16(sV + stage * kTile + r * kStride + col, v + key * p.v_row_stride + col, valid);
    }
  };

  // Key range of this block: causal rows < m0 + kBlockM see keys < m0 + kBlockM only.
  const int n_end = CAUSAL ? min(p.seq_k, m0 + kBlockM) : p.seq_k;
  const int n_blocks = (n_end + kBlockN - 1) / kBlockN;

  float o_acc[kOTiles][4];
#pragma unroll
  for (int d = 0; d < kOTiles; ++d) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[d][i] = 0.f;
  }
  float row_max[2] = {kNegInf, kNegInf};  // running max of scaled scores, rows 0/1
  float row_sum[2] = {0.f, 0.f};          // this thread's partial sums (quad-reduced at end)

  if (n_blocks > 0) load_kv(0, 0);
  cp_async_commit();

  for (int nb = 0; nb < n_blocks; ++nb) {
    const int stage = nb & 1;
    // Prefetch the next tile into the other stage (its readers finished at the
    // __syncthreads that ended the previous iteration). Always commit a group, empty
    // on the last tile, so that wait_group<1> below means "tile nb has landed".
    if (nb + 1 < n_blocks) load_kv(nb + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const T* sKs = sK + stage * kTile;
    const T* sVs = sV + stage * kTile;

    // ---- S = Q K^T ----
    float s[kSTiles][4];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0.f;
      uint32_t kf[kKSteps][2];
#pragma unroll
      for (int s2 = 0; s2 < kKSteps / 2; ++s2) {
        // lanes 8i..8i+7 address matrix i: keys 8j + lane%8, dims 32*s2 + 8i.
        const T* src = sKs + (j * 8 + (lane % 8)) * kStride + s2 * 32 + (lane / 8) * 8;
        ldmatrix_x4(kf[2 * s2][0], kf[2 * s2][1], kf[2 * s2 + 1][0], kf[2 * s2 + 1][1], src);
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) DType<T>::mma(s[j], qf[kk], kf[kk][0], kf[kk][1]);
    }

    // ---- scale into the log2 domain; mask keys past seq_k and (causal) keys > row ----
    const int n0 = nb * kBlockN;
    const bool need_mask = (n0 + kBlockN > p.seq_k) || (CAUSAL && n0 + kBlockN - 1 > m0);
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[j][i] *= p.scale_log2;
        if (need_mask) {
          const int key = n0 + j * 8 + 2 * c + (i & 1);  // C layout: cols 2c, 2c+1
          const int row = (i < 2) ? row0 : row1;           // C layout: d[2], d[3] row g+8
          if (key >= p.seq_k || (CAUSAL && key > row)) s[j][i] = kNegInf;
        }
      }
    }

    // ---- online softmax (fp32) ----
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = quad_max(mx);  // the 4 lanes of a quad share rows g and g + 8
      // A row with every key so far masked keeps max -inf; subtract 0 instead so that
      // exp2(-inf - -inf) never makes a NaN (its P and alpha are then 0).
      const float m_use = (mx == kNegInf) ? 0.f : mx;
      const float alpha = exp2f(row_max[r] - m_use);
      row_max[r] = mx;
      row_sum[r] *= alpha;
#pragma unroll
      for (int d = 0; d < kOTiles; ++d) {
        o_acc[d][2 * r] *= alpha;
        o_acc[d][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        s[j][2 * r] = exp2f(s[j][2 * r] - m_use);
        s[j][2 * r + 1] = exp2f(s[j][2 * r + 1] - m_use);
        row_sum[r] += s[j][2 * r] + s[j][2 * r + 1];
      }
    }

    // ---- O += P V ----
#pragma unroll
    for (int t = 0; t < kBlockN / 16; ++t) {
      uint32_t pa[4];
      pa[0] = DType<T>::pack(s[2 * t][0], s[2 * t][1]);          // row g,     keys 16t+2c
      pa[1] = DType<T>::pack(s[2 * t][2], s[2 * t][3]);          // row g + 8, keys 16t+2c
      pa[2] = DType<T>::pack(s[2 * t + 1][0], s[2 * t + 1][1]);  // row g,     keys +8
      pa[3] = DType<T>::pack(s[2 * t + 1][2], s[2 * t + 1][3]);  // row g + 8, keys +8
#pragma unroll
      for (int dp = 0; dp < HEAD_DIM / 16; ++dp) {
        // lanes 8i..8i+7 address matrix i: keys 16t + 8(i&1) + lane%8, dims 8(2dp + i/2).
        const int mi = lane / 8;
        const T* src =
            sVs + (t * 16 + (mi & 1) * 8 + (lane % 8)) * kStride + (2 * dp + (mi >> 1)) * 8;
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(b0, b1, b2, b3, src);
        DType<T>::mma(o_acc[2 * dp], pa, b0, b1);
        DType<T>::mma(o_acc[2 * dp + 1], pa, b2, b3);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

  // ---- O /= l, store (rows past seq_q are not written) ----
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = l > 0.f ? 1.f / l : 0.f;  // l == 0 only when seq_k == 0
    const int row = r ? row1 : row0;
    if (row < p.seq_q) {
      T* dst = o + static_cast<int64_t>(row) * p.o_row_stride + 2 * c;
#pragma unroll
      for (int d = 0; d < kOTiles; ++d) {
        *reinterpret_cast<uint32_t*>(dst + d * 8) =
            DType<T>::pack(o_acc[d][2 * r] * inv, o_acc[d][2 * r + 1] * inv);
      }
    }
  }
}

template <typename T, int HEAD_DIM, bool CAUSAL>
cudaError_t launch(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr int kThreads = TileConfig<HEAD_DIM>::kWarps * 32;
  constexpr int kBlockM = 16 * TileConfig<HEAD_DIM>::kWarps;
  constexpr int kSmem = smem_bytes<HEAD_DIM>();
  auto kernel = flash_fwd_kernel<T, HEAD_DIM, CAUSAL>;
  if (kSmem > 48 * 1024) {
    // Above 48 KB a block needs an explicit opt-in (sm_80: up to 163 KB, sm_89: 99 KB,
    // sm_90: 227 KB). Cheap next to a kernel that uses this much shared memory.
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid((p.seq_q + kBlockM - 1) / kBlockM, p.heads, p.batch);
  kernel<<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int HEAD_DIM>
cudaError_t dispatch_causal(const FlashFwdParams& p, cudaStream_t stream) {
  return p.causal ? launch<T, HEAD_DIM, true>(p, stream) : launch<T, HEAD_DIM, false>(p, stream);
}

template <typename T>
cudaError_t dispatch_head_dim(const FlashFwdParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return dispatch_causal<T, 64>(p, stream);
    case 128:
      return dispatch_causal<T, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t flash_fwd_launch(const FlashFwdParams& p, cudaStream_t stream) {
  if (p.seq_q < 1 || p.seq_k < 0 || p.batch < 1 || p.heads < 1 || p.heads_kv < 1 ||
      p.heads % p.heads_kv != 0 || p.heads > 65535 || p.batch > 65535) {
    return cudaErrorInvalidValue;
  }
  return p.is_bf16 ? dispatch_head_dim<__nv_bfloat16>(p, stream)
                   : dispatch_head_dim<__half>(p, stream);
}

#ifdef FLASH_STANDALONE_STUB
// A host main() for a compile, link and run check without torch or a GPU
// (tests/test_cuda_flash.py builds it with -DFLASH_STANDALONE_STUB): the dispatcher
// must refuse an unsupported head_dim before it touches the GPU.
int main() {
  FlashFwdParams p{};
  p.batch = 1;
  p.heads = p.heads_kv = 1;
  p.seq_q = p.seq_k = 1;
  p.head_dim = 96;
  return flash_fwd_launch(p, nullptr) == cudaErrorInvalidValue ? 0 : 1;
}
#endif
