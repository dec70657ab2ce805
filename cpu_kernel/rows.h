// Row kernels: the fused step for a batch of rows that share nothing but the rotate plan.
//
// A call processes n rows; row r reads x[r][0..D), table rows cos[r] and sin[r] (already converted
// to the compute type C, padded to Dp with zeros, and, for a signed-permutation plan, with the sign
// folded into sin) and writes out[r][0..D). x[r] and out[r] may be the same row (in-place): a row is
// read completely before any of it is written.
#pragma once

#include "cpu_kernel/rotate_plan.h"

namespace npu_ops_transformer_ext {
namespace cpu {

struct RowBatch {
  int64_t n;                // rows in this batch
  const void* const* x;     // [n] row pointers, element type T
  void* const* out;         // [n] row pointers, element type T
  const void* const* cos;   // [n] table rows, compute type C, length Dp
  const void* const* sin;   // [n] table rows, compute type C, length Dp
  bool stream_out;          // hint: out is large and fresh; non-temporal stores may be used
  bool in_place;            // out[r] == x[r]: a row must be read whole before any of it is written
  // The x rows of the batch that comes next (nullptr, 0 for none), so that prefetching runs on
  // across the end of this batch instead of starting every batch cold.
  const void* const* next_x = nullptr;
  int64_t next_n = 0;

  // Row r + ahead of this batch, continuing into the next one; nullptr past both.
  const void* row_ahead(int64_t r, int64_t ahead) const {
    const int64_t i = r + ahead;
    if (i < n) return x[i];
    return i - n < next_n ? next_x[i - n] : nullptr;
  }
};

// Row r of a batch with its element types: `const auto [x, out, cs, sn] = BatchRow<T, C>(b, r);`
template <typename T, typename C>
struct BatchRow {
  const T* x;
  T* out;
  const C* cos;
  const C* sin;
  BatchRow(const RowBatch& b, int64_t r)
      : x(static_cast<const T*>(b.x[r])),
        out(static_cast<T*>(b.out[r])),
        cos(static_cast<const C*>(b.cos[r])),
        sin(static_cast<const C*>(b.sin[r])) {}
};

// Per-thread scratch the row kernels may use: kScratchRows fp32/fp64 rows of Dp + 16 entries.
constexpr int64_t kScratchRows = 5;

using RowsFn = void (*)(const RotatePlan& plan, const RowBatch& batch, void* scratch);

// Converts one table row (D elements of the table's dtype) to the compute type, padded with zeros
// to Dp; where sign_bits is given, XORs it in (the exact negation that folds y's signs into sin).
using TableFn = void (*)(const void* src, int64_t D, int64_t Dp, const uint32_t* sign_bits,
                         void* dst);

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
RowsChoice avx512_rows_fn(at::ScalarType x_dtype, const RotatePlan& plan);
TableFn avx512_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype, const RotatePlan& plan);
RowsChoice avx512_bf16_rows_fn(at::ScalarType x_dtype, const RotatePlan& plan);
TableFn avx512_bf16_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype, const RotatePlan& plan);
#endif

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
