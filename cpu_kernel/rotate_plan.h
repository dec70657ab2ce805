// A rotate matrix y compiled once per call into what the row kernels need.
//
// A *signed permutation* (each column and each row of y holds at most one non-zero, +1 or -1) is
// compiled into a partner index and a sign per output column j: (x @ y)[j] = sign[j] * x[partner[j]]
// (partner[j] = -1 and sign[j] = +1 for an all-zero column: (x @ y)[j] = 0). The sign is folded into
// the sin table, so the fused step is out[j] = x[j] * cos[j] + x[partner[j]] * (sign[j] * sin[j]),
// which equals the fp32 formula bit for bit (negation is exact). For the AVX-512 rows the partner
// list is further compiled per 16-lane chunk into an offset load, an in-register two-source permute,
// or (the fallback) a gather.
//
// Any other y is *dense*: kept as a float matrix for the blocked GEMM rows.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace npu_ops_transformer_ext {
namespace cpu {

constexpr int64_t kLanes = 16;  // fp32 lanes of one AVX-512 register

// How one 16-lane output chunk finds its partners in the fp32 row buffer.
enum class ChunkKind : int32_t {
  kOffset = 0,   // partners are xf[start .. start+15], consecutive: one unaligned load
  kPermute = 1,  // partners lie in the aligned vectors a and b: one two-source permute
  kGather = 2,   // anything else: one gather
  kSegments = 3, // partners form up to kMaxSegments runs of consecutive elements: one masked
                 // load per run
};

constexpr int kMaxSegments = 3;

struct alignas(64) ChunkPlan {
  int32_t idx[kLanes];    // kPermute: lane index into (vector a | vector b); kGather: xf index
  int32_t kind;           // ChunkKind
  int32_t start;          // kOffset: first partner index
  int32_t a, b;           // kPermute: source vectors (in units of 16 floats)
  uint32_t nonzero_mask;  // lanes whose partner exists (zero column -> lane forced to 0)
  int32_t nseg;                       // kSegments: number of runs
  int32_t seg_base[kMaxSegments];     // kSegments: lane l of run k reads x[seg_base[k] + l]
  uint32_t seg_mask[kMaxSegments];    // kSegments: the lanes of run k
  // Any kind, rows of at most kRowChunks chunks held in registers: lane l reads element
  // row_idx[l] (0 for a lane without a partner), which lies in vectors 2k and 2k + 1 for the lanes
  // of row_part[k] (one two-source permute per nonzero part).
  alignas(64) int32_t row_idx[kLanes];
  uint32_t row_part[4];
};

constexpr int64_t kRowChunks = 8;  // chunks of a row the chunk rows may hold in registers

// The same permutation for bf16 rows taken as 32-bit *pairs* of elements (2i, 2i+1), which the
// AVX-512 pair rows split into even and odd fp32 vectors with one shift and one AND (no widening).
// It exists when every output pair takes its partners from one source pair, in order or swapped
// (interleave, half and quarter modes and their 2D/3D compositions with even sections), and D is a
// multiple of 32. Per group g of 32 output elements (16 pairs):
enum class PairKind : int32_t {
  kSame = 0,      // the partners are the group's own pairs (lane l from lane l): no load
  kOffset = 1,    // partner pairs are consecutive from element `start`: one unaligned load
  kPermute = 2,   // partner pairs lie in groups a and b: one two-source permute
  kPermute2 = 3,  // ... in groups a, b (lanes not in mask2) and c, d (lanes in mask2): two
  kSegments = 4,  // partner pairs form up to kMaxSegments runs of consecutive pairs: one masked
                  // load per run (taken instead of the permutes when it has at most that many)
};

struct alignas(64) PairGroupPlan {
  int32_t idx[kLanes];   // kPermute*: lane l takes lane idx[l] of (group a | group b)
  int32_t idx2[kLanes];  // kPermute2: lane l in mask2 takes lane idx2[l] of (group c | group d)
  int32_t kind;          // PairKind
  int32_t start;         // kOffset: first partner element (even)
  int32_t a, b, c, d;    // source groups
  uint32_t mask2;        // kPermute2: the pair lanes taken from (c | d)
  uint32_t swap;         // pair lanes whose partners are (odd, even) of their source pair
  uint32_t nonzero;      // one bit per output element (32): elements that have a partner
  int32_t nseg;                    // kSegments: number of runs
  int32_t seg_base[kMaxSegments];  // kSegments: pair lane l of run k reads the pair at element seg_base[k] + 2l
  uint32_t seg_mask[kMaxSegments]; // kSegments: the pair lanes of run k
  // Any kind, rows of at most 4 groups held in registers: pair lane l reads pair row_src[l] of the
  // row (0 for a lane without partners), from groups 2 and 3 where row_hi has bit l.
  alignas(64) int32_t row_src[kLanes];
  uint32_t row_hi;
};

// Splits n lanes into runs of consecutive sources, for the kSegments chunks and pair groups: lane l
// is live when src[l] >= 0, and extends the run of lane l - 1 when that lane is live and
// src[l] == src[l - 1] + 1, else starts a new run (so a lane whose source is 0 right after a dead
// lane starts its own). Run k reads lane l from base[k] + l, its lanes are mask[k]. Returns the
// number of runs, or kMaxSegments + 1 as soon as there are more than kMaxSegments (base and mask
// then hold the first kMaxSegments).
int split_runs(const int32_t* src, int n, int32_t base[kMaxSegments], uint32_t mask[kMaxSegments]);

// The pair groups of a signed permutation, or an empty vector when it has no pair form.
std::vector<PairGroupPlan> plan_pair_groups(const std::vector<int32_t>& partner, int64_t D);

// What every group of a pair plan does, when they all do the same (most modes): the row loop
// then has no per-group branches.
// kHalfRotation: offset loads where group g's partners are group g + NG/2 mod NG (rotate_half).
// kUnswapped: every group reads other pairs in order, each element has a partner (the 3D modes):
// no per-group swap or zero-lane steps.
enum class PairShape : int32_t { kMixed, kAllSwapped, kAllOffset, kHalfRotation, kUnswapped };

PairShape pair_shape(const std::vector<PairGroupPlan>& groups);

struct RotatePlan {
  int64_t D = 0;
  int64_t Dp = 0;         // D rounded up to a multiple of kLanes
  bool is_perm = false;   // signed (partial) permutation
  // Signed permutation:
  std::vector<int32_t> partner;  // [D], -1 for an all-zero column
  std::vector<int8_t> sign;      // [D], +1 or -1
  std::vector<uint32_t> sign_bits;  // [Dp], 0x80000000 where sign is -1: XOR into fp32 sin
  std::vector<uint16_t> sign16;     // [Dp], 0x8000 where sign is -1: XOR into 16-bit sin
  std::vector<ChunkPlan> chunks; // [Dp / 16]
  std::vector<PairGroupPlan> pair_groups;  // [D / 32], or empty (see PairGroupPlan)
  // Chunk c's partners are chunk c + (Dp/16)/2 mod Dp/16, in order, all lanes live: rotate_half
  // of one section (the AVX-512 rows then load and convert each chunk once).
  bool chunks_half_rotation = false;
  PairShape pair_shape = PairShape::kMixed;  // of pair_groups
  // The same permutation as runs, for the portable kernels: output columns [begin, end) take
  // their partners from src, src + 1, ... (src = -1: all-zero columns). `pair_swap`: every
  // partner is j ^ 1 (the interleave mode), which they handle as pairs.
  struct Run {
    int32_t begin, end, src;
  };
  std::vector<Run> runs;
  bool pair_swap = false;
  // Which of the fixed permutations (fixed_perms.h) the partners are, or -1.
  int32_t fixed_perm = -1;
  // Dense: y as double and as float, row-major [D][Dp] with zero padding.
  std::vector<double> y64;
  std::vector<float> y32;
  // Dense y whose every entry is exact in bf16, none subnormal, and D even: rows 2i and 2i+1
  // interleaved as bf16 pairs, [D/2][Dp][2], for the AVX512_BF16 dot-product GEMM (empty
  // otherwise).
  std::vector<c10::BFloat16> y_bf16_pairs;
  // The bf16 x elements that GEMM computes exactly: zero, or absolute bits in [dp_lo_bits,
  // dp_hi_bits]. Then every product with an entry of y is zero or at least 2^-102 in magnitude (so
  // no product or partial sum is subnormal, which vdpbf16ps would flush) and no partial sum can
  // overflow.
  uint16_t dp_lo_bits = 0, dp_hi_bits = 0;
};

// The order in which every dense GEMM (every ISA) accumulates the rows of y: 0, 1, 2, ..., except
// for bf16 x with a y that has y_bf16_pairs (the GEMM AVX512_BF16 may take): 1, 0, 3, 2, ... (each
// pair's odd row first, as vdpbf16ps does). With one fused multiply-add per step (vdpbf16ps's
// products of bf16 are exact, see dp_lo_bits) the result is then the same on every ISA.
inline bool dense_pairwise(const RotatePlan& plan, bool x_is_bf16) { return x_is_bf16 && !plan.y_bf16_pairs.empty(); }
inline int64_t dense_row_order(int64_t k, int64_t D, bool pairwise) {
  return pairwise && (k ^ 1) < D ? (k ^ 1) : k;
}

// Inspects y ([D, D], any dtype/strides) in O(D^2) and compiles it.
RotatePlan make_rotate_plan(const at::Tensor& y);

// make_rotate_plan with a small cache keyed by y's dtype, size and *contents* (a byte compare of
// y, far cheaper than compiling it), so a model that passes the same matrix every call compiles it
// once; each thread compares with its last matrix first, without taking the cache's lock. Never
// keyed by address, identity or version counter: a freed and reused buffer, or a write the version
// counter does not see (through `.data`, as gradcheck perturbs its inputs, or through memory shared
// with NumPy), cannot return a stale plan. A miss makes the key and the plan from one copy of y, so
// a write to y during a call (a data race of the caller's, whose result is then undefined) leaves
// no entry behind whose plan is not that of its key.
std::shared_ptr<const RotatePlan> cached_rotate_plan(const at::Tensor& y);

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
