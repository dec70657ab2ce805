// The rope_matrix tiling: one struct shared by the host (op_host/), the kernel (op_kernel/) and the
// CPU twin, plus the row arithmetic both sides use so they cannot disagree.
//
// Problem view. x is seen as [outer, S, inner, D], contiguous, where S is the dimension the sin/cos
// tables run along: BNSD with [S, D] / [1, 1, S, D] tables is outer = B*N, inner = 1; BSND with
// [S, 1, D] / [1, S, 1, D] tables is outer = B, inner = N. The tables are [S, D] rows.
//
// Work split. blockDim = sCores * oGroups cube cores: S is split evenly over sCores <= ceil(S / 2)
// (every cube core gets at least one row, two when S allows) and the outer heads over oGroups, the
// pair op_host's split_cores finds for the least work on the busiest core (a decode step, S = 1:
// one S-core, the heads over up to every cube core; a long S: S alone).
// Cube core b owns the S rows of S-core b / oGroups (CubeRows) of the outer heads of group
// b % oGroups (CubeHeads); counts differ by at most one in both. It walks its rows in blocks of up
// to stepRows rows (a multiple of 2*chunkRows), and each block in head groups of its outer heads
// (outerChunk outer heads x innerChunk inner heads): per step (block, head group) it multiplies those rows of the group's heads by y into a
// workspace slot (two slots, a ring), one IterateAll per head, then signals its two vector cores;
// vector core 2b+s takes the first (s = 0) or second (s = 1) half of the block's rows, walks them in
// chunks of up to chunkRows rows (its UB tile) for every head of the group, and signals back when
// the slot is free; a block of one row goes to both, each taking half of the group's heads
// (SubHeads). Every x row (an S row of one head) therefore belongs to exactly one cube core and
// exactly one vector core.
//
// Workspace bound. A slot holds at most kSlotBytes, whatever the shape: the user workspace is at
// most blockDim * kSlots * kSlotBytes (2 MiB per AI Core), because the head groups (and, for a very
// wide S row, the rows per chunk) shrink until one step fits a slot.
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
constexpr uint64_t kSlotBytes = 1ull << 20;  // bytes of one workspace slot at most (2 slots per AI Core)

struct RopeMatrixTiling {
  uint32_t blockDim;        // AI Cores launched (= cube cores, sCores * oGroups); vector cores = 2 * blockDim
  uint32_t d;               // head dim D (elements per row)
  uint32_t dPad;            // row pitch in UB (elements): D rounded up so a row of x, of a table and of
                            // an fp32 temporary are each a multiple of 32 bytes
  uint32_t chunkRows;       // max S rows one vector core handles at once (its UB tile)
  uint32_t xBytes;          // sizeof(x element) = sizeof(out) = sizeof(workspace element)
  uint32_t tableBytes;      // sizeof(sin/cos element): x's or 4 (float)
  uint32_t ubBytes;         // UB bytes the vector side allocates (<= ubBudget)
  uint32_t ubBudget;        // usable UB bytes per vector core this tiling was sized for
  uint64_t outer;           // product of x dims before the S dim
  uint64_t s;               // S: rows of the tables
  uint64_t inner;           // product of x dims between S and D
  uint64_t sBase;           // S / sCores: rows of every cube core ...
  uint64_t sRem;            // ... plus one for S-cores [0, S % sCores)
  uint64_t outerChunk;      // outer heads per step (a head group), <= outer
  uint64_t innerChunk;      // inner heads per step, <= inner; the slot's row pitch is innerChunk * D
  uint64_t stepRows;        // S rows per step (the cube's rows per IterateAll, times innerChunk):
                            // 2 * chunkRows * k, k >= 1 vector chunks per vector core and step
  uint64_t headStride;      // elements between two `outer` heads inside a workspace slot
                            // = stepRows * innerChunk * D
  uint64_t slotElems;       // elements of one workspace slot = outerChunk * headStride (<= kSlotBytes)
  uint64_t userWorkspace;   // user workspace bytes = blockDim * kSlots * slotElems * xBytes
  uint32_t sCores;          // cube cores along S ...
  uint32_t oGroups;         // ... and along the outer heads: blockDim = sCores * oGroups
  uint64_t oBase;           // outer / oGroups: outer heads of every cube core ...
  uint64_t oRem;            // ... plus one for head groups [0, outer % oGroups)
};

// S rows of cube core `b`: [begin, begin + count).
__aicore__ inline void CubeRows(const RopeMatrixTiling& t, uint64_t b, uint64_t& begin, uint64_t& count) {
  const uint64_t sc = b / t.oGroups;
  const uint64_t extra = sc < t.sRem ? sc : t.sRem;
  begin = sc * t.sBase + extra;
  count = t.sBase + (sc < t.sRem ? 1 : 0);
}

// Outer heads of cube core `b`: [begin, begin + count).
__aicore__ inline void CubeHeads(const RopeMatrixTiling& t, uint64_t b, uint64_t& begin, uint64_t& count) {
  const uint64_t og = b % t.oGroups;
  begin = og * t.oBase + (og < t.oRem ? og : t.oRem);
  count = t.oBase + (og < t.oRem ? 1 : 0);
}

// Head groups per row chunk of a cube core with `heads` outer heads: ceil(heads / outerChunk) *
// ceil(inner / innerChunk). Group g covers outer heads [o0, o0 + on) (from the core's first,
// `oBegin`) and inner heads [i0, i0 + in).
__aicore__ inline uint64_t HeadGroups(const RopeMatrixTiling& t, uint64_t heads) {
  return ((heads + t.outerChunk - 1) / t.outerChunk) * ((t.inner + t.innerChunk - 1) / t.innerChunk);
}
__aicore__ inline void HeadGroup(const RopeMatrixTiling& t, uint64_t oBegin, uint64_t heads, uint64_t g, uint64_t& o0,
                                 uint64_t& on, uint64_t& i0, uint64_t& in) {
  const uint64_t gi = (t.inner + t.innerChunk - 1) / t.innerChunk;
  const uint64_t rel = (g / gi) * t.outerChunk;
  o0 = oBegin + rel;
  i0 = (g % gi) * t.innerChunk;
  on = heads - rel < t.outerChunk ? heads - rel : t.outerChunk;
  in = t.inner - i0 < t.innerChunk ? t.inner - i0 : t.innerChunk;
}

// Row chunks cube core b (and both of its vector cores) go through; each has HeadGroups steps.
__aicore__ inline uint64_t Steps(const RopeMatrixTiling& t, uint64_t cubeRows) {
  return (cubeRows + t.stepRows - 1) / t.stepRows;
}

// Rows of row chunk `step` of a cube core with `cubeRows` rows: all of them [0, n) relative to the
// step's first row, and the share of vector sub-block `sub`: [first, first + count).
__aicore__ inline uint64_t StepRows(const RopeMatrixTiling& t, uint64_t cubeRows, uint64_t step) {
  const uint64_t begin = step * t.stepRows;
  const uint64_t left = cubeRows - begin;
  return left < t.stepRows ? left : t.stepRows;
}
__aicore__ inline void SubRows(uint64_t stepRows, uint64_t sub, uint64_t& first, uint64_t& count) {
  const uint64_t half0 = (stepRows + 1) / 2;
  first = sub == 0 ? 0 : half0;
  count = sub == 0 ? half0 : stepRows - half0;
}

// A step of one S row (a decode step, S = 1) is not split by rows, which would leave vector
// sub-block 1 idle: both take the row, and each a share of the head group's heads instead: the
// outer heads [o, o + on) split in two (the first share one larger), or, for a group of one outer
// head, its inner heads [i, i + in). A share may be empty (one head in all).
__aicore__ inline bool SplitsHeads(uint64_t stepRows) { return stepRows == 1; }
__aicore__ inline void SubHeads(uint64_t sub, uint64_t& o, uint64_t& on, uint64_t& i, uint64_t& in) {
  uint64_t& n = on > 1 ? on : in;  // the dim that is split
  uint64_t& first = on > 1 ? o : i;
  const uint64_t half0 = (n + 1) / 2;
  if (sub != 0) first += half0;
  n = sub == 0 ? half0 : n - half0;
}

// ---- the vector-only kernel for a signed (partial) permutation y (op_kernel/rope_matrix_perm_kernel.h)
//
// Work split. blockDim = sCores * oGroups vector cores: S is split evenly over sCores <= S and the
// outer heads over oGroups, the pair op_host's split_cores finds for the least work on the busiest
// core (a decode step: the heads over the cores; a long S: S alone). Vector core v
// takes the S rows of S-core v / oGroups and the outer heads of group v % oGroups, every inner
// head, in chunks of up to chunkRows S rows (one load of the cos/sin rows per chunk, reused for
// every head). Every (outer, S, inner) row belongs to exactly one vector core.
struct RopePermTiling {
  uint32_t blockDim;    // vector cores launched (KERNEL_TYPE_AIV_ONLY: one block per vector core)
  uint32_t d;           // head dim D
  uint32_t dPad;        // row pitch in UB (elements), as RopeMatrixTiling::dPad
  uint32_t chunkRows;   // max S rows per chunk (UB-sized)
  uint32_t xBytes;      // sizeof(x element)
  uint32_t tableBytes;  // sizeof(sin/cos element)
  uint32_t ubBytes;     // UB bytes the kernel allocates (<= ubBudget)
  uint32_t ubBudget;    // usable UB bytes per vector core
  uint32_t sCores;      // cores along S
  uint32_t oGroups;     // cores along the outer heads
  uint32_t partnerPath;  // how the kernel finds the partners: a PermPartnerPath
  uint64_t outer, s, inner;
  uint64_t sBase, sRem;  // S rows per S-core: sBase, one more for S-cores [0, sRem)
  uint64_t oBase, oRem;  // outer heads per group: oBase, one more for groups [0, oRem)
  uint64_t constOffset;  // bytes from the tiling start to the Gather offsets (uint32[chunkRows*dPad]:
                         // bytes into the fp32 x tile, or on kPermPathGatherWords the first half
                         // holds bytes into the 2-byte x tile per 32-bit word) followed by the signs
                         // (float[chunkRows*dPad])
};

// After the offsets and signs the packed perm tiling holds y's partner runs: a uint32 count, then
// kMaxPermRuns x {first column, first partner column, columns}. A run is a block of columns whose
// partners lie the same distance away (each half in half mode, each quarter, each half of a 2D
// block). When every column is in one of at most kMaxPermRuns runs that start and end on 8-column
// (32-byte fp32) boundaries, the kernel moves each run with one strided UB copy instead of the
// Gather (5 elements per cycle on A2 against the copy's 64); otherwise the count is 0.
constexpr uint32_t kMaxPermRuns = 8;
constexpr uint32_t kPermRunWords = 1 + 3 * kMaxPermRuns;

// How the perm kernel finds x[partner[j]] in UB (RopePermTiling::partnerPath, chosen by the host):
// one strided UB copy per partner run (above); for 2-byte x whose partners are the pairs
// (2i, 2i+1) (interleave in every block), by swapping the two 16-bit halves of every 32-bit word
// of the x tile (ShiftLeft, ShiftRight by 16 and Or, at full vector speed) before the Cast; for
// 2-byte x whose columns move in pairs (columns 2i and 2i+1 take the partners 2k and 2k+1, as in
// half mode with even halves that are not 8-column aligned, e.g. 3D 44+44+40), one Gather of the
// 32-bit words of the 2-byte x tile (half the elements of a Gather of fp32 x, at A2's 5 elements
// per cycle for either width) before the Cast; or one Gather of the fp32 x tile with the
// precomputed offsets (any other permutation).
enum PermPartnerPath : uint32_t {
  kPermPathGather = 0,
  kPermPathRuns = 1,
  kPermPathSwapHalves = 2,
  kPermPathGatherWords = 3,
};

__aicore__ inline void PermCoreWork(const RopePermTiling& t, uint64_t v, uint64_t& sBegin, uint64_t& rows,
                                    uint64_t& oBegin, uint64_t& heads) {
  const uint64_t sc = v / t.oGroups, og = v % t.oGroups;
  sBegin = sc * t.sBase + (sc < t.sRem ? sc : t.sRem);
  rows = t.sBase + (sc < t.sRem ? 1 : 0);
  oBegin = og * t.oBase + (og < t.oRem ? og : t.oRem);
  heads = t.oBase + (og < t.oRem ? 1 : 0);
}

}  // namespace rope_matrix
