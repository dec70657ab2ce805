// The one input validator shared by every backend (CPU kernel, NPU binding, CPU twin).
//
// Every check runs before anything is written and its message names the argument, the expected
// and the actual shape/dtype, e.g.
//   rope_matrix: y must be [D, D] with D = x.size(-1) = 128, got [64, 64]
// The limits quoted in the README are the constants below.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace npu_ops_transformer_ext {

// x must have at least this many dimensions: [..., S, D] (BNSD, BSND, [S, D], ...).
constexpr int64_t kMinXRank = 2;

// True for the dtypes x may have: bfloat16, float16, float32, float64.
bool is_supported_x_dtype(at::ScalarType t);

// "[1, 24, 8192, 128]"
std::string shape_str(at::IntArrayRef sizes);

// Checks one rope_matrix problem. `op` prefixes every message; `x_name` names the x argument
// ("x", "q", "k"). Throws c10::Error (ValueError/TypeError in Python) on the first violation.
//   x:        rank >= 2, dtype bf16/fp16/fp32/fp64, last dim D
//   y:        [D, D], dtype x.dtype or float32
//   sin, cos: rank 1..x.dim(), last dim D, every other dim 1 or equal to x's (aligned from the
//             right), dtype x.dtype or float32
//   all tensors on x's device
void check_rope_matrix_inputs(const char* op, const at::Tensor& x, const at::Tensor& y,
                              const at::Tensor& sin, const at::Tensor& cos,
                              const char* x_name = "x");

// Whether two elements of x are (partly) the same memory, decided exactly from x's sizes, strides
// and element size (kTooMany: the layout is so irregular that deciding it would list more than
// 2^24 offsets).
enum class InternalOverlap { kNo, kYes, kTooMany };
InternalOverlap internal_overlap(const at::Tensor& x);

// Whether some byte of x is also a byte of t, decided exactly from their storages, offsets, sizes,
// strides and element sizes (dims of stride 0 of t add no memory and are ignored).
enum class SharedMemory { kNo, kYes, kTooMany };
SharedMemory shared_memory(const at::Tensor& x, const at::Tensor& t);

// Extra checks for the in-place variant: x must not overlap itself (any strides are fine
// otherwise: packed-QKV views, strided slices) and must share no memory with mat, sin or cos
// (which may be expanded or overlap themselves: they are only read).
void check_rope_matrix_inplace(const char* op, const at::Tensor& x, const at::Tensor& mat,
                               const at::Tensor& sin, const at::Tensor& cos);

}  // namespace npu_ops_transformer_ext
