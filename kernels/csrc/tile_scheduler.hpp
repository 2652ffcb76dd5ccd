// Which tile a CTA takes next: the static stride or the causal counter.
// Part of the Hopper kernel (its tile order); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include "named_barrier.hpp"

namespace flash_sm90 {

using namespace cute;

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

}  // namespace flash_sm90
