// The one input validator shared by every backend (CPU kernel, NPU binding, CPU twin).
//
// Every check runs before anything is written and its message names the argument, the expected
// and the actual shape/dtype, e.g.
//   rope_matrix: mat must be [D, D] with D = x.size(-1) = 128, got [64, 64]
// The limits quoted in the README are the constants below.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <utility>

#include <string>

namespace npu_ops_transformer_ext {

// x must have at least this many dimensions: [..., S, D] (BNSD, BSND, [S, D], ...).
constexpr int64_t kMinXRank = 2;

// True for the dtypes x may have: bfloat16, float16, float32, float64.
bool is_supported_x_dtype(at::ScalarType t);

// The Python name of a dtype: "torch.bfloat16" (not c10's "BFloat16"), for messages.
std::string dtype_name(at::ScalarType t);

// "[1, 24, 8192, 128]"
std::string shape_str(at::IntArrayRef sizes);

// The operands as every kernel takes them, after check_rope_matrix_inputs:
//   mat:      as given when its dtype is x.dtype or float32; any other dtype (float64, an integer
//             dtype, bfloat16 with float16 x, ...) has been checked to hold only values x.dtype
//             represents exactly, and converted to x.dtype.
//   sin, cos: as given when their dtype is x.dtype or float32; any other floating dtype is
//             converted to float32 once: exact from bfloat16/float16, rounded to nearest (ties to
//             even) from float64. So a float64 table gives the same bits as table.float().
struct RopeOperands {
  at::Tensor mat, sin, cos;
};

// A table in the dtype the kernels take (see RopeOperands).
at::Tensor kernel_table(const at::Tensor& t, at::ScalarType x_dtype);

// A ValueError naming the first of `named` that is not a tensor (None passed through torch.ops for
// a Tensor argument arrives as an undefined tensor): "op: sin must be a tensor, got None".
void check_defined(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> named);

// Checks one rope_matrix problem. `op` prefixes every message; `x_name` names the x argument
// ("x", "q", "k"). Throws c10::Error (ValueError/TypeError in Python) on the first violation.
//   every argument a tensor (check_defined)
//   x:        rank >= 2, dtype bf16/fp16/fp32/fp64, last dim D
//   mat:      [D, D]; dtype x.dtype or float32, or any floating/integer dtype whose entries x.dtype
//             holds exactly (checked on the values)
//   sin, cos: rank 1..x.dim(), last dim D, every other dim 1 or equal to x's (aligned from the
//             right), any floating dtype
//   all tensors on x's device
// Returns the operands to hand to the kernel (RopeOperands); x itself is never converted.
RopeOperands check_rope_matrix_inputs(const char* op, const at::Tensor& x, const at::Tensor& mat,
                                      const at::Tensor& sin, const at::Tensor& cos,
                                      const char* x_name = "x");

// rope_matrix_qk: every argument a tensor (check_defined, q and k first), check_rope_matrix_inputs for
// q, q and k of the same D and dtype, then check_rope_matrix_inputs for k.
RopeOperands check_rope_matrix_qk_inputs(const char* op, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& mat, const at::Tensor& sin,
                                         const at::Tensor& cos);

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
