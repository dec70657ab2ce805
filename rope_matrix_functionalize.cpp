// rope_matrix_ under functionalization (torch.compile, torch.export, torch.func.functionalize).
//
// Functionalization turns every mutation in a traced program into a value plus a write-back.
// Without a kernel of its own, PyTorch 2.13 functionalizes a mutating custom op through
// auto_functionalized_v2, which regenerates a view made inside the compiled code from its absolute
// storage offset, and so writes the update of x[0:1] of an input base[1:3] into base[2] (or loses
// it, or makes a view of D = 0), and inductor drops a symbolic storage offset there (k =
// qkv[:, :, 1] with a dynamic head count was rotated at q's place). The Functionalize kernel below
// does for rope_matrix_ what PyTorch's generated kernels do for its own in-place ops: it computes
// the new value of x out of place and hands it to x's FunctionalTensorWrapper, whose view metadata
// writes it back through the view chain to the elements x really is.
//
// _rope_matrix_inplace_value is that value: rope_matrix_'s checks (its argument rules and messages,
// and x sharing no memory with itself or with mat, sin, cos), then rope_matrix. Registered at
// CompositeExplicitAutograd, so every backend computes it through its own rope_matrix kernel.
#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "validation/rope_matrix_validate.h"

namespace npu_ops_transformer_ext {
namespace {

using ValueSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
using InplaceSig = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);

at::Tensor rope_matrix_inplace_value(const at::Tensor& x, const at::Tensor& mat, const at::Tensor& sin,
                                     const at::Tensor& cos) {
  check_rope_matrix_inputs("rope_matrix_", x, mat, sin, cos);
  check_rope_matrix_inplace("rope_matrix_", x, mat, sin, cos);
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix", "").typed<ValueSig>();
  return op.call(x, mat, sin, cos);
}

// The tensor under a functional wrapper, brought up to date with the wrapper's pending updates
// first; any other tensor as it is.
at::Tensor unwrapped(const at::Tensor& t) {
  namespace impl = at::functionalization::impl;
  if (!impl::isFunctionalTensor(t)) return t;
  impl::sync(t);
  return impl::from_functional_tensor(t);
}

void rope_matrix_inplace_functionalize(const at::Tensor& x, const at::Tensor& mat, const at::Tensor& sin,
                                       const at::Tensor& cos) {
  namespace impl = at::functionalization::impl;
  const at::Tensor x_ = unwrapped(x);
  const at::Tensor mat_ = unwrapped(mat);
  const at::Tensor sin_ = unwrapped(sin);
  const at::Tensor cos_ = unwrapped(cos);
  if (!impl::isFunctionalTensor(x)) {
    // An x outside functionalization (a constant of the program) is updated in place, as
    // PyTorch's own in-place ops do, unless the update would come from a functional tensor.
    TORCH_CHECK(!impl::isFunctionalTensor(mat) && !impl::isFunctionalTensor(sin) && !impl::isFunctionalTensor(cos),
                "rope_matrix_: x is not a functional tensor while mat, sin or cos is; mutating a "
                "non-functional tensor with a functional one is not allowed (pass x into the "
                "functionalized program as an input)");
    static const auto inplace = c10::Dispatcher::singleton()
                                    .findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix_", "")
                                    .typed<InplaceSig>();
    at::AutoDispatchSkipFunctionalize guard;
    inplace.call(x_, mat_, sin_, cos_);
    return;
  }
  static const auto value = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("npu_ops_transformer_ext::_rope_matrix_inplace_value", "")
                                .typed<ValueSig>();
  at::Tensor out;
  {
    at::AutoDispatchSkipFunctionalize guard;
    out = value.call(x_, mat_, sin_, cos_);
  }
  impl::replace_(x, out);
  impl::commit_update(x);
  impl::sync(x);
}

}  // namespace
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, CompositeExplicitAutograd, m) {
  m.impl("_rope_matrix_inplace_value", &npu_ops_transformer_ext::rope_matrix_inplace_value);
}

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, Functionalize, m) {
  m.impl("rope_matrix_", &npu_ops_transformer_ext::rope_matrix_inplace_functionalize);
}
