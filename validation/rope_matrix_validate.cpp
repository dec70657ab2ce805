#include "rope_matrix_validate.h"

#include <ATen/MemoryOverlap.h>

#include <sstream>

namespace npu_ops_transformer_ext {

bool is_supported_x_dtype(at::ScalarType t) {
  return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat || t == at::kDouble;
}

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    os << (i ? ", " : "") << sizes[i];
  }
  os << "]";
  return os.str();
}

namespace {

void check_table(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x,
                 const char* x_name) {
  const int64_t D = x.size(-1);
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type() || t.scalar_type() == at::kFloat, op, ": ",
                   name, " must have dtype ", x.scalar_type(), " (", x_name,
                   ".dtype) or Float, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= x.dim(), op, ": ", name,
                    " must have rank 1..", x.dim(), " (", x_name, " has rank ", x.dim(),
                    ") and broadcast to ", x_name, " ", shape_str(x.sizes()), ", got ",
                    shape_str(t.sizes()));
  TORCH_CHECK_VALUE(t.size(-1) == D, op, ": ", name, " must have last dim D = ", x_name,
                    ".size(-1) = ", D, ", got ", shape_str(t.sizes()));
  const int64_t off = x.dim() - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) {
    TORCH_CHECK_VALUE(t.size(i) == 1 || t.size(i) == x.size(off + i), op, ": ", name, " ",
                      shape_str(t.sizes()), " does not broadcast to ", x_name, " ",
                      shape_str(x.sizes()), ": dim ", i, " is ", t.size(i), ", expected 1 or ",
                      x.size(off + i));
  }
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " must be on ", x_name,
                    "'s device ", x.device(), ", got ", t.device());
}

}  // namespace

void check_rope_matrix_inputs(const char* op, const at::Tensor& x, const at::Tensor& y,
                              const at::Tensor& sin, const at::Tensor& cos, const char* x_name) {
  TORCH_CHECK_VALUE(x.defined() && y.defined() && sin.defined() && cos.defined(), op,
                    ": every argument must be a defined tensor");
  TORCH_CHECK_VALUE(x.dim() >= kMinXRank, op, ": ", x_name, " must have rank >= ", kMinXRank,
                    " ([..., S, D]), got ", shape_str(x.sizes()));
  TORCH_CHECK_TYPE(is_supported_x_dtype(x.scalar_type()), op, ": ", x_name,
                   " must have dtype BFloat16, Half, Float or Double, got ", x.scalar_type());
  const int64_t D = x.size(-1);
  TORCH_CHECK_VALUE(y.dim() == 2 && y.size(0) == D && y.size(1) == D, op,
                    ": y must be [D, D] with D = ", x_name, ".size(-1) = ", D, ", got ",
                    shape_str(y.sizes()));
  TORCH_CHECK_TYPE(y.scalar_type() == x.scalar_type() || y.scalar_type() == at::kFloat, op,
                   ": y must have dtype ", x.scalar_type(), " (", x_name,
                   ".dtype) or Float, got ", y.scalar_type());
  TORCH_CHECK_VALUE(y.device() == x.device(), op, ": y must be on ", x_name, "'s device ",
                    x.device(), ", got ", y.device());
  check_table(op, "sin", sin, x, x_name);
  check_table(op, "cos", cos, x, x_name);
}

void check_rope_matrix_inplace(const char* op, const at::Tensor& x, const at::Tensor& y,
                               const at::Tensor& sin, const at::Tensor& cos) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(x) != at::MemOverlap::Yes, op,
                    ": x has internally overlapping memory (e.g. an expanded tensor); "
                    "in-place update is impossible, call x.contiguous() first");
  for (const auto* pair : {&y, &sin, &cos}) {
    TORCH_CHECK_VALUE(at::get_overlap_status(x, *pair) == at::MemOverlapStatus::No, op,
                      ": x shares memory with ", (pair == &y ? "y" : pair == &sin ? "sin" : "cos"),
                      "; the in-place update would read values it has already overwritten");
  }
}

}  // namespace npu_ops_transformer_ext
