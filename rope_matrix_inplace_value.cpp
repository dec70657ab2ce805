// _rope_matrix_inplace_value: what rope_matrix_(x, mat, sin, cos) writes into x, returned as a new
// tensor, after the in-place op's own checks (its argument rules and messages, and x sharing no
// memory with itself or with mat, sin, cos). Registered at CompositeExplicitAutograd, so every
// backend runs it through its own rope_matrix kernel.
//
// The Python rope_matrix_ runs as x.copy_(_rope_matrix_inplace_value(x, ...)) inside
// torch.compile: PyTorch 2.13's functionalization writes a mutating custom op's update of a view
// made in the graph back at the wrong elements when the graph input it views has a storage offset,
// while an aten copy_ into such a view is written back correctly (ops.py, rope_matrix_).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "validation/rope_matrix_validate.h"

namespace npu_ops_transformer_ext {
namespace {

at::Tensor rope_matrix_inplace_value(const at::Tensor& x, const at::Tensor& mat, const at::Tensor& sin,
                                     const at::Tensor& cos) {
  check_rope_matrix_inputs("rope_matrix_", x, mat, sin, cos);
  check_rope_matrix_inplace("rope_matrix_", x, mat, sin, cos);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(x, mat, sin, cos);
}

}  // namespace
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, CompositeExplicitAutograd, m) {
  m.impl("_rope_matrix_inplace_value", &npu_ops_transformer_ext::rope_matrix_inplace_value);
}
