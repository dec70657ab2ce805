// How the Matmul API (Norm config, cube-only) keeps B in L1, which decides how often IterateAll reads
// each block of B from GM. Read from asc-devkit impl/adv_api/detail/matmul:
// - B without IBSHARE (and with CFG_NORM even with it: only the IBShare config selects the global
//   buffers) gets the NORMAL cube-in buffer (resource/cube_in_buffer/cube_in_buffer_utils.h,
//   GetCubeInBufferType). Its Init (cube_in_buffer_normal.h) keeps a cache of depthB1 blocks of
//   baseK x baseN when the K extent "fully loads" (depthB1 >= kIter * stepN), none when it does not
//   and depthB1 <= 2, none either for kIter == 1 with depthB1 == 2 (plain double buffering), and the
//   first depthB1 - 2 blocks when depthB1 > 2 but K does not fully load. A block found in the cache
//   (Hit) is not copied again.
// - The Norm scheduler (scheduler/base/scheduler_norm_base.h, MoveOnIterateOrderM/N) resets that
//   cache when the iteration over M ends: with ORDER_M (iterateOrder 0) once the whole M range is
//   done, i.e. at the end of every IterateAll; with ORDER_N at the end of each inner M loop (stepM
//   blocks). Nothing keeps B between two IterateAll calls.
// So per IterateAll a cached K block of B is read once (ORDER_M) or once per stepM M blocks (ORDER_N),
// an uncached one once per M block.
#pragma once

#include <cstdint>

namespace twin {

// K blocks of B (of baseK rows, stepN == 1) the NORMAL cube-in buffer keeps in L1 within one IterateAll.
inline int64_t b_cached_k_blocks(int64_t depthB1, int64_t kIter, int64_t stepN) {
  const int64_t need = kIter * stepN;
  int64_t cache;
  if (depthB1 > 2) cache = depthB1 < need ? depthB1 - 2 : depthB1;
  else if (depthB1 < need || (kIter == 1 && depthB1 == 2)) cache = 0;
  else cache = depthB1;
  return cache < kIter ? cache : kIter;
}

// GM reads of K block `kb` of B in one IterateAll of `mIter` M blocks.
inline int64_t b_block_reads(int64_t kb, int64_t cached, int64_t mIter, int64_t iterateOrder, int64_t stepM) {
  if (kb >= cached) return mIter;
  if (iterateOrder == 1) return (mIter + stepM - 1) / (stepM > 0 ? stepM : 1);
  return 1;
}

}  // namespace twin
