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
};

// Per-thread scratch the row kernels may use: kScratchRows fp32/fp64 rows of Dp + 16 entries.
constexpr int64_t kScratchRows = 5;

using RowsFn = void (*)(const RotatePlan& plan, const RowBatch& batch, void* scratch);

// The best row kernel for x's dtype on this CPU. NPU_OPS_CPU_ISA=generic forces the portable one.
RowsFn select_rows_fn(at::ScalarType x_dtype, const RotatePlan& plan);

// Which kernel family select_rows_fn takes on this CPU: "avx512" or "generic".
const char* cpu_isa_name();

// Portable kernels (rows_generic.cpp).
RowsFn generic_rows_fn(at::ScalarType x_dtype, bool is_perm);
#ifdef NPU_OPS_HAVE_AVX512
// AVX-512 kernels (rows_avx512.cpp); nullptr for float64.
RowsFn avx512_rows_fn(at::ScalarType x_dtype, bool is_perm);
#endif

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
