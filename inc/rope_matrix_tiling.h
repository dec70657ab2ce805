// The rope_matrix tiling: one struct shared by the host (op_host/), the kernel (op_kernel/) and the
// CPU twin, plus the row arithmetic both sides use so they cannot disagree.
//
// Problem view. x is seen as [outer, S, inner, D], contiguous, where S is the dimension the sin/cos
// tables run along: BNSD with [S, D] / [1, 1, S, D] tables is outer = B*N, inner = 1; BSND with
// [S, 1, D] / [1, S, 1, D] tables is outer = B, inner = N. The tables are [S, D] rows.
//
// Work split. Cube core b (of blockDim) owns the S rows [cubeRowBegin(b), +cubeRowCount(b)), and the
// split is even (counts differ by at most one). It walks them in steps of up to 2*chunkRows rows:
// per step it multiplies those rows of every (outer, inner) head by y into a workspace slot (two
// slots, ping-pong), then signals its two vector cores; vector core 2b+s takes the first (s = 0) or
// second (s = 1) half of the step's rows, for every head, and signals back when the slot is free.
// Every S row therefore belongs to exactly one cube core and exactly one vector core.
//
// GM offsets are 64-bit everywhere (B*N*S*D may exceed 2^31 elements).
#pragma once

#include <stdint.h>

#ifndef __aicore__
#define __aicore__
#endif

namespace rope_matrix {

// Cross-core flag ids (mode 2, AIC <-> its two AIVs). 0..10 is the documented safe user range;
// 11..14 belong to SyncAll. The cube-only Matmul uses no flags.
constexpr uint16_t kFlagReady0 = 4;  // + slot: cube -> vector "x@y of this slot is in the workspace"
constexpr uint16_t kFlagFree0 = 6;   // + slot: vector -> cube "this slot has been read, reuse it"
constexpr uint32_t kSlots = 2;       // workspace ping-pong slots per cube core

struct RopeMatrixTiling {
  uint32_t blockDim;        // AI Cores launched (= cube cores); vector cores = 2 * blockDim
  uint32_t d;               // head dim D (elements per row)
  uint32_t dPad;            // row pitch in UB (elements): D rounded up so a row of x, of a table and of
                            // an fp32 temporary are each a multiple of 32 bytes
  uint32_t chunkRows;       // max S rows one vector core handles per step (UB-sized)
  uint32_t xBytes;          // sizeof(x element) = sizeof(out) = sizeof(workspace element)
  uint32_t tableBytes;      // sizeof(sin/cos element): x's or 4 (float)
  uint32_t ubBytes;         // UB bytes the vector side allocates (<= ubBudget)
  uint32_t ubBudget;        // usable UB bytes per vector core this tiling was sized for
  uint64_t outer;           // product of x dims before the S dim
  uint64_t s;               // S: rows of the tables
  uint64_t inner;           // product of x dims between S and D
  uint64_t sBase;           // S / blockDim: rows of every cube core ...
  uint64_t sRem;            // ... plus one for cube cores [0, S % blockDim)
  uint64_t headStride;      // elements between two `outer` heads inside a workspace slot
                            // = 2 * chunkRows * inner * D
  uint64_t slotElems;       // elements of one workspace slot = outer * headStride
  uint64_t userWorkspace;   // user workspace bytes = blockDim * kSlots * slotElems * xBytes
};

// S rows of cube core `b`: [begin, begin + count).
__aicore__ inline void CubeRows(const RopeMatrixTiling& t, uint64_t b, uint64_t& begin, uint64_t& count) {
  const uint64_t extra = b < t.sRem ? b : t.sRem;
  begin = b * t.sBase + extra;
  count = t.sBase + (b < t.sRem ? 1 : 0);
}

// Steps cube core b (and both of its vector cores) go through.
__aicore__ inline uint64_t Steps(const RopeMatrixTiling& t, uint64_t cubeRows) {
  const uint64_t per = 2ull * t.chunkRows;
  return (cubeRows + per - 1) / per;
}

// Rows of step `step` of a cube core with `cubeRows` rows: all of them [0, n) relative to the
// step's first row, and the share of vector sub-block `sub`: [first, first + count).
__aicore__ inline uint64_t StepRows(const RopeMatrixTiling& t, uint64_t cubeRows, uint64_t step) {
  const uint64_t per = 2ull * t.chunkRows;
  const uint64_t begin = step * per;
  const uint64_t left = cubeRows - begin;
  return left < per ? left : per;
}
__aicore__ inline void SubRows(uint64_t stepRows, uint64_t sub, uint64_t& first, uint64_t& count) {
  const uint64_t half0 = (stepRows + 1) / 2;
  first = sub == 0 ? 0 : half0;
  count = sub == 0 ? half0 : stepRows - half0;
}

}  // namespace rope_matrix
