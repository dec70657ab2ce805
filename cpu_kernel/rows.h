// Row kernels: the fused step for a batch of rows that share nothing but the rotate plan.
//
// A call processes a batch of rows: the rows of hn broadcast positions (heads) for nr consecutive
// table rows. Row (r, h) reads x row x_head[h] + x_off[r], table rows cos[r] and sin[r] (already
// converted to the compute type C, padded to Dp with zeros, and, for a signed-permutation plan,
// with the sign folded into sin) and writes out row out_head[h] + out_off[r]. x and out rows may be
// the same (in-place): a row is read completely before any of it is written.
#pragma once

#include "cpu_kernel/rotate_plan.h"

namespace npu_ops_transformer_ext {
namespace cpu {

struct RowBatch {
  int64_t nr;                  // table rows
  int64_t hn;                  // positions per table row
  const char* const* x_head;   // [hn] each position's x base, element type T
  char* const* out_head;       // [hn] each position's output base
  const int64_t* x_off;        // [nr] bytes from a position's x base to table row r's row
  const int64_t* out_off;      // [nr] the same for the output
  const void* const* cos;      // [nr] table rows, compute type C, length Dp
  const void* const* sin;      // [nr]
  bool stream_out;             // hint: out is large and fresh; non-temporal stores may be used
  bool in_place;               // x and out rows are the same: read a row whole before writing it
  bool prefetch = true;        // ask for x rows ahead (x_ahead); off for calls whose x is cache-resident
  // The batch that comes next (next_hn = 0 for none), so that prefetching runs on across the end
  // of this batch instead of starting every batch cold.
  const char* const* next_x_head = nullptr;
  const int64_t* next_x_off = nullptr;
  int64_t next_nr = 0, next_hn = 0;

  int64_t n() const { return nr * hn; }
  const void* x(int64_t r, int64_t h) const { return x_head[h] + x_off[r]; }
  void* out(int64_t r, int64_t h) const { return out_head[h] + out_off[r]; }
  // Position h's x row `ahead` table rows after r, continuing into the next batch; nullptr past both
  // or when the batch does not prefetch.
  const void* x_ahead(int64_t r, int64_t h, int64_t ahead) const {
    if (!prefetch) return nullptr;
    int64_t i = r + ahead;
    if (i < nr) return x_head[h] + x_off[i];
    i -= nr;
    return (h < next_hn && i < next_nr) ? next_x_head[h] + next_x_off[i] : nullptr;
  }
};

// Row (r, h) of a batch with its element types: `const auto [x, out, cs, sn] = BatchRow<T, C>(b, r, h);`
template <typename T, typename C>
struct BatchRow {
  const T* x;
  T* out;
  const C* cos;
  const C* sin;
  BatchRow(const RowBatch& b, int64_t r, int64_t h)
      : x(static_cast<const T*>(b.x(r, h))),
        out(static_cast<T*>(b.out(r, h))),
        cos(static_cast<const C*>(b.cos[r])),
        sin(static_cast<const C*>(b.sin[r])) {}
};

// Per-thread scratch the row kernels may use: kScratchRows fp32/fp64 rows of Dp + 16 entries.
constexpr int64_t kScratchRows = 5;

using RowsFn = void (*)(const RotatePlan& plan, const RowBatch& batch, void* scratch);

// Converts one table row (D elements of the table's dtype) to the compute type, padded with zeros
// to Dp; where sign_bits is given, XORs it in (the exact negation that folds y's signs into sin).
// A null TableFn: the row kernel reads the caller's table rows as they are (raw_tables).
using TableFn = void (*)(const void* src, int64_t D, int64_t Dp, const uint32_t* sign_bits,
                         void* dst);

// Whether the AVX-512 rows read the caller's table rows as they are, converting them in registers
// (no per-call conversion; bf16 and fp16 rows are half the bytes of fp32 ones): sin and cos of x's
// own dtype and rows that hold a table row in registers -- bf16 x with a pair plan, or the chunk
// rows of the half rotation (an even number of chunks) and the interleave swap for D a multiple of
// 16 up to kRowChunks chunks. (The other chunk rows and the fp16 pair rows, which hold the x row
// in registers, keep fp32 tables: with raw ones, 3D [1, 24, 256, 128] on one thread was no faster
// in fp32 and 62 against 66 us BSND but 90 against 77 BNSD in fp16.) The fixed rows of fp16 and
// fp32 x read them as they are too: fp16 3D 44+44+40, one thread, per row 9.6 -> 8.5 ns BNSD and
// 6.9 -> 6.4 BSND at [1, 24, 256, 128]; [1, 24, 16384, 128] BNSD at two threads 1.14 -> 1.09x the
// limit (fp32 13.5 -> 13.0-13.5 ns and 1.14 -> 1.12x).
inline bool raw_tables(at::ScalarType x, at::ScalarType sin_t, at::ScalarType cos_t, const RotatePlan& plan) {
  if (sin_t != x || cos_t != x || !plan.is_perm || x == at::kDouble) return false;
  if (x == at::kBFloat16 && !plan.pair_groups.empty()) return true;
  if ((x == at::kHalf || x == at::kFloat) && plan.fixed_perm >= 0) return true;
  const int64_t nc = plan.D / kLanes;
  const bool chunks = plan.D == plan.Dp && nc <= kRowChunks;
  return chunks && ((plan.chunks_half_rotation && nc % 2 == 0) || plan.pair_swap);
}

// A row kernel and what it is: "pairs", "chunks", "chunks-buffered", "dense", "dense-dpbf16"
// (AVX-512 families) or "portable".
struct RowsChoice {
  RowsFn fn;
  const char* kind;
};

struct Kernels {
  RowsFn rows;
  TableFn cos_table;
  TableFn sin_table;
  const char* isa;        // "avx512_bf16", "avx512", "avx2" or "generic"
  const char* rows_kind;  // RowsChoice::kind
};

// Throws the ValueError of an invalid NPU_OPS_CPU_ISA (select_kernels does too), for calls that
// move nothing and so select no kernel.
void check_isa_setting();

// The best kernels for these dtypes on this CPU, chosen once per call.
// NPU_OPS_CPU_ISA=generic (or avx2, avx512) caps the choice, for tests and comparisons.
Kernels select_kernels(at::ScalarType x_dtype, at::ScalarType sin_dtype, at::ScalarType cos_dtype,
                       const RotatePlan& plan);

// Portable kernels (rows_generic.cpp).
RowsFn generic_rows_fn(at::ScalarType x_dtype, bool is_perm);
TableFn generic_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype);
#ifdef NPU_OPS_HAVE_AVX2
// The portable kernels compiled for AVX2/FMA/F16C (rows_avx2.cpp).
RowsFn avx2_rows_fn(at::ScalarType x_dtype, bool is_perm);
TableFn avx2_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype);
#endif
#ifdef NPU_OPS_HAVE_AVX512
// AVX-512 kernels (rows_avx512*.cpp); nullptr where they have none (float64).
// raw_tables: raw_tables() (then the table functions are null).
RowsChoice avx512_rows_fn(at::ScalarType x_dtype, const RotatePlan& plan, bool raw_tables);
TableFn avx512_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype, const RotatePlan& plan, bool raw_tables);
RowsChoice avx512_bf16_rows_fn(at::ScalarType x_dtype, const RotatePlan& plan, bool raw_tables);
TableFn avx512_bf16_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype, const RotatePlan& plan,
                             bool raw_tables);
#endif

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
