// Named barriers and fences of the producer and consumer warpgroups.
// Part of the Hopper kernel (the barriers every part shares); flash_fwd_sm90.cuh includes it after the kernel
// configuration, so it sees Traits and the switches there. The file names follow
// FlashAttention-3's hopper/ folder.
#pragma once

#include <cute/tensor.hpp>

namespace flash_sm90 {

using namespace cute;

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

}  // namespace flash_sm90
