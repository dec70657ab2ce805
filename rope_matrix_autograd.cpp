// Autograd of rope_matrix and rope_matrix_qk (and the refusal rule and version bump of
// rope_matrix_), registered in C++ at the Autograd (and, for rope_matrix_, ADInplaceOrView)
// dispatch keys.
//
// A call that needs no gradient (grad mode off, or no input requiring grad) goes straight to the
// backend kernel below autograd, without entering Python: for a decode-sized call the Python autograd
// layer cost more than the kernel. A call that needs one records a torch::autograd::Function whose
// backward is made of registered ops and differentiable ATen ops, so higher derivatives keep working:
//
//   dx   = rope_matrix_backward(g, y, sin, cos)       (the registered helper op; its own autograd
//                                                       formulas give the second derivatives)
//   dcos = sum_b(g * x)
//   dsin = sum_b(g * (x @ y))                         (x @ y = rope_matrix(x, y, 1, 0): the
//                                                       x @ y of the forward, rounded as the kernel
//                                                       does, wherever x is finite; x * 0 makes a
//                                                       non-finite x[j] a NaN at j)
//   dy   = X^T @ (g * sin)                            (X, g*sin flattened to [M, D])
//
// with sum_b the sum over the dims a table is broadcast on, float32 math (float64 for float64 x).
// These are the formulas of python/npu_ops_transformer_ext/autograd.py, which documents them and
// keeps the helper ops' own autograd. x is saved only when y, sin or cos requires grad.
// Forward-mode AD is not implemented: an input carrying a forward-mode tangent is refused.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "validation/rope_matrix_validate.h"

namespace npu_ops_transformer_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using RopeSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
using QkSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                 const at::Tensor&, const at::Tensor&);

const c10::TypedOperatorHandle<RopeSig>& op_rope() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix", "").typed<RopeSig>();
  return op;
}
const c10::TypedOperatorHandle<QkSig>& op_qk() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix_qk", "").typed<QkSig>();
  return op;
}
const c10::TypedOperatorHandle<RopeSig>& op_backward() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix_backward", "")
                             .typed<RopeSig>();
  return op;
}
const c10::TypedOperatorHandle<QkSig>& op_qk_backward() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix_qk_backward", "")
                             .typed<QkSig>();
  return op;
}

at::ScalarType acc_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// Sums t along `dim` (kept, size 1) as a pairwise tree: element i of the first half plus element
// i of the second, level by level, the element left over at an odd level added at the end. Each
// output element's order of additions depends on t.size(dim) alone, not on the other dims (torch's
// sum splits a reduction by the sizes of all of them), so a rank holding some of the rows of S gets
// the bits of the same rows of a single-process run (docs/sequence-parallel.md). `in_place`: t is
// a temporary of the caller's, and each level adds into its first half (as fast as torch's sum:
// nothing is allocated); else slices and adds, differentiable. Both give the same bits.
at::Tensor tree_sum(at::Tensor t, int64_t dim, bool in_place) {
  // Sizes as SymInts: under torch.compile with dynamic shapes they are symbolic, and each level's
  // comparison may then guard on S (the tree's shape depends on S).
  if (t.sym_size(dim) == 0) return t.sum(dim, /*keepdim=*/true);
  std::vector<at::Tensor> rest;
  while (t.sym_size(dim) > 1) {
    const c10::SymInt n = t.sym_size(dim), h = n / 2;
    if (n % 2 == 1) rest.push_back(t.narrow_symint(dim, n - 1, 1));
    if (in_place) {
      t.narrow_symint(dim, 0, h).add_(t.narrow_symint(dim, h, h));
      t = t.narrow_symint(dim, 0, h);
    } else {
      t = t.narrow_symint(dim, 0, h) + t.narrow_symint(dim, h, h);
    }
  }
  for (const at::Tensor& r : rest) t = in_place ? t.add_(r) : t + r;
  return t;
}

// Sums t (x's shape; a temporary the caller gives up) down to `shape`, a shape that broadcasts to
// it, dimension by dimension in ascending order, each with tree_sum.
at::Tensor reduce_to(at::Tensor t, c10::SymIntArrayRef shape) {
  // (An efficient zero tensor, the product with a zero grad_output, is immutable: summed out of
  // place.)
  const bool in_place = !(at::GradMode::is_enabled() && t.requires_grad()) && !t._is_zerotensor();
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  bool reduced = false;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if ((i < lead || shape[static_cast<size_t>(i - lead)] == 1) && t.sym_size(i) != 1) {
      t = tree_sum(t, i, in_place);
      reduced = true;
    }
  }
  if (!reduced) return lead > 0 ? t.reshape_symint(shape) : t;
  // In place, t is a view of the temporary: a copy of the table's size lets the temporary go.
  return in_place ? t.reshape_symint(shape).clone(at::MemoryFormat::Contiguous) : t.reshape_symint(shape);
}

// reduce_to(g * v, shape) in `acc`, with v = x, or v = x @ y as the forward computes it when `y` is
// given. Outside a recorded graph (the usual backward) it goes in slices along the outermost dim of x
// but the last that the table keeps: each slice's product and sums stay in cache, where the whole at once made
// full-size temporaries (x in acc, the products) whose fresh pages cost more than the arithmetic.
// tree_sum's order depends only on the reduced dims, so the bits are those of the whole at once.
// Symbolic sizes (torch.compile with dynamic shapes traces this backward) take the whole at once.
at::Tensor product_sum(const at::Tensor& g, const at::Tensor& x, const at::Tensor* y, const at::Tensor& table,
                       at::ScalarType acc) {
  const auto product = [&](const at::Tensor& gs, const at::Tensor& xs) {
    if (y == nullptr) return gs.to(acc) * xs;  // promotes xs to acc element by element, exactly
    const at::Tensor one = at::ones_symint({y->sym_size(0)}, xs.options().dtype(at::kFloat));
    return gs.to(acc) * op_rope().call(xs, *y, one, at::zeros_like(one));  // the forward's x @ y
  };
  const auto symbolic = [](const at::Tensor& t) { return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides(); };
  // Batched gradients (is_grads_batched=True, which vmaps g with the legacy Batched key; or
  // functorch's vmap) take the whole at once too: the slices would be copied into an unbatched
  // result, which vmap refuses.
  const auto batched = [](const at::Tensor& t) {
    return t.key_set().has(c10::DispatchKey::Batched) || t.key_set().has(c10::DispatchKey::FuncTorchBatched);
  };
  if (symbolic(g) || symbolic(x) || symbolic(table) || batched(g) || batched(x) || batched(table) ||
      (y != nullptr && batched(*y))) {
    return reduce_to(product(g, x), table.sym_sizes());
  }
  const at::IntArrayRef shape = table.sizes();
  constexpr int64_t kSliceBytes = 512 * 1024;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  int64_t k = -1;  // never the last dim: x @ y needs whole rows
  for (int64_t i = std::max<int64_t>(lead, 0); i < x.dim() - 1 && k < 0; ++i) {
    if (shape[static_cast<size_t>(i - lead)] != 1 && x.size(i) > 1) k = i;
  }
  const bool recorded = at::GradMode::is_enabled() &&
                        (g.requires_grad() || x.requires_grad() || (y != nullptr && y->requires_grad()));
  const int64_t elem = at::elementSize(acc);
  if (recorded || k < 0 || x.numel() * elem <= kSliceBytes) return reduce_to(product(g, x), table.sym_sizes());
  const int64_t per_index = x.numel() / x.size(k) * elem;
  const int64_t step = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(per_index, 1));
  at::Tensor out = at::empty(shape, x.options().dtype(acc));
  std::vector<int64_t> part(shape.begin(), shape.end());
  for (int64_t c0 = 0; c0 < x.size(k); c0 += step) {
    const int64_t n = std::min(step, x.size(k) - c0);
    part[static_cast<size_t>(k - lead)] = n;
    out.narrow(k - lead, c0, n)
        .copy_(reduce_to(product(g.narrow(k, c0, n), x.narrow(k, c0, n)), c10::fromIntArrayRefSlow(part)));
  }
  return out;
}

// t as [M, D] rows: reshape (which batched gradients, is_grads_batched=True, can take; flatten of
// a batched tensor has no batching rule), flatten when D = 0 (reshape({-1, 0}) is ambiguous).
at::Tensor rows(const at::Tensor& t) {
  return t.sym_size(-1) > 0 ? t.reshape_symint({-1, t.sym_size(-1)}) : t.flatten(0, -2);
}

// Sum of the y/sin/cos gradients over (grad_out, x) pairs (pairs with an undefined tensor are
// skipped). Differentiable: ATen ops and the registered rope_matrix.
std::tuple<at::Tensor, at::Tensor, at::Tensor> table_grads(
    const std::vector<std::pair<at::Tensor, at::Tensor>>& pairs, const at::Tensor& y, const at::Tensor& sin,
    const at::Tensor& cos, bool need_y, bool need_sin, bool need_cos) {
  at::Tensor dy, dsin, dcos;
  const auto add = [](at::Tensor& acc, const at::Tensor& t) { acc = acc.defined() ? acc + t : t; };
  for (const auto& [g, x] : pairs) {
    if (!g.defined() || !x.defined()) continue;
    const at::ScalarType acc = acc_dtype(x.scalar_type());
    if (need_cos) add(dcos, product_sum(g, x, nullptr, cos, acc));
    if (need_sin) add(dsin, product_sum(g, x, &y, sin, acc));
    if (need_y) {
      const at::Tensor xt = rows(x.to(acc)).t(), gs = rows(g.to(acc) * sin.to(acc));  // [D, M], [M, D]
      // k's product added to q's by addmm: the form inductor makes of mm + add, which adds in
      // another order than the two apart (inductor may still regroup the products:
      // docs/training.md). q and k of different precisions are added apart.
      if (!dy.defined()) {
        dy = xt.mm(gs);
      } else if (dy.scalar_type() == acc) {
        dy = at::addmm(dy, xt, gs);
      } else {
        add(dy, xt.mm(gs));
      }
    }
  }
  const auto cast = [](const at::Tensor& t, const at::Tensor& ref) {
    return t.defined() ? t.to(ref.scalar_type()) : t;
  };
  return {cast(dy, y), cast(dsin, sin), cast(dcos, cos)};
}

// Forward-mode AD (torch.autograd.forward_ad, torch.func.jvp and jacfwd) is not implemented: a call
// whose inputs carry a forward-mode tangent is refused, naming the input, instead of returning an
// output without its tangent.
void refuse_forward_ad(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> named) {
  for (const auto& [name, t] : named) {
    TORCH_CHECK(!(t->defined() && t->_fw_grad(/*level=*/0).defined()), op, ": ", name,
                " carries a forward-mode tangent (torch.autograd.forward_ad, torch.func.jvp or jacfwd); "
                "forward-mode AD is not supported, use reverse mode (backward(), torch.autograd.grad)");
  }
}

bool needs_grad(std::initializer_list<const at::Tensor*> ts) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : ts) {
    if (t->requires_grad()) return true;
  }
  return false;
}

struct RopeMatrixFn : public torch::autograd::Function<RopeMatrixFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                            const at::Tensor& cos) {
    const bool keep_x = y.requires_grad() || sin.requires_grad() || cos.requires_grad();
    ctx->save_for_backward({keep_x ? x : at::Tensor(), y, sin, cos});
    ctx->set_materialize_grads(false);
    at::AutoDispatchBelowADInplaceOrView guard;
    return op_rope().call(x, y, sin, cos);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &y = s[1], &sin = s[2], &cos = s[3];
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    at::Tensor dx, dy, dsin, dcos;
    if (ctx->needs_input_grad(0)) dx = op_backward().call(g, y, sin, cos);
    const bool ny = ctx->needs_input_grad(1), ns = ctx->needs_input_grad(2), nc = ctx->needs_input_grad(3);
    if (ny || ns || nc) std::tie(dy, dsin, dcos) = table_grads({{g, x}}, y, sin, cos, ny, ns, nc);
    return {dx, dy, dsin, dcos};
  }
};

struct RopeMatrixQkFn : public torch::autograd::Function<RopeMatrixQkFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& y,
                               const at::Tensor& sin, const at::Tensor& cos) {
    const bool keep = y.requires_grad() || sin.requires_grad() || cos.requires_grad();
    ctx->save_for_backward({keep ? q : at::Tensor(), keep ? k : at::Tensor(), y, sin, cos});
    ctx->set_materialize_grads(false);
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [qo, ko] = op_qk().call(q, k, y, sin, cos);
    return {qo, ko};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &q = s[0], &k = s[1], &y = s[2], &sin = s[3], &cos = s[4];
    const at::Tensor &gq = grads[0], &gk = grads[1];
    at::Tensor dq, dk, dy, dsin, dcos;
    const bool nq = ctx->needs_input_grad(0) && gq.defined(), nk = ctx->needs_input_grad(1) && gk.defined();
    if (nq && nk) {
      std::tie(dq, dk) = op_qk_backward().call(gq, gk, y, sin, cos);
    } else {
      if (nq) dq = op_backward().call(gq, y, sin, cos);
      if (nk) dk = op_backward().call(gk, y, sin, cos);
    }
    const bool ny = ctx->needs_input_grad(2), ns = ctx->needs_input_grad(3), nc = ctx->needs_input_grad(4);
    if (ny || ns || nc) std::tie(dy, dsin, dcos) = table_grads({{gq, q}, {gk, k}}, y, sin, cos, ny, ns, nc);
    return {dq, dk, dy, dsin, dcos};
  }
};

at::Tensor rope_matrix_autograd(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                                const at::Tensor& cos) {
  check_defined("rope_matrix", {{"x", &x}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});  // before autograd touches them
  refuse_forward_ad("rope_matrix", {{"x", &x}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});
  if (!needs_grad({&x, &y, &sin, &cos})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op_rope().call(x, y, sin, cos);
  }
  return RopeMatrixFn::apply(x, y, sin, cos);
}

std::tuple<at::Tensor, at::Tensor> rope_matrix_qk_autograd(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& y, const at::Tensor& sin,
                                                           const at::Tensor& cos) {
  check_defined("rope_matrix_qk", {{"q", &q}, {"k", &k}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});  // before autograd touches them
  refuse_forward_ad("rope_matrix_qk", {{"q", &q}, {"k", &k}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});
  if (!needs_grad({&q, &k, &y, &sin, &cos})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op_qk().call(q, k, y, sin, cos);
  }
  const variable_list out = RopeMatrixQkFn::apply(q, k, y, sin, cos);
  return {out[0], out[1]};
}

using InplaceSig = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);

const c10::TypedOperatorHandle<InplaceSig>& op_inplace() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("npu_ops_transformer_ext::rope_matrix_", "").typed<InplaceSig>();
  return op;
}

void refuse_x_requiring_grad(const at::Tensor& x) {
  TORCH_CHECK(!x.requires_grad(),
              "rope_matrix_: x requires grad; the in-place op is for inference and cannot be "
              "differentiated. Use rope_matrix (out of place) for training, or pass a tensor that "
              "does not require grad (e.g. x.detach()).");
}

// rope_matrix_ is for inference: it refuses an x that requires grad (in any grad mode, inference
// mode included) and, with grad mode on, a mat/sin/cos that requires grad, naming the argument. It
// bumps x's version counter (ADInplaceOrView, which runs for a normal x in every mode, inside
// torch.inference_mode() too, where the Autograd kernel does not), so a graph that saved x before
// the in-place call fails at backward instead of computing a wrong gradient.
void rope_matrix_inplace_autograd(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                                  const at::Tensor& cos) {
  check_defined("rope_matrix_", {{"x", &x}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});  // before autograd touches them
  refuse_forward_ad("rope_matrix_", {{"x", &x}, {"mat", &y}, {"sin", &sin}, {"cos", &cos}});
  refuse_x_requiring_grad(x);
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> named[] = {{"mat", &y}, {"sin", &sin}, {"cos", &cos}};
    for (const auto& [name, t] : named) {
      TORCH_CHECK(!t->requires_grad(), "rope_matrix_: ", name,
                  " requires grad; the in-place op is for inference and cannot be differentiated. Use "
                  "rope_matrix (out of place), or call it under torch.no_grad().");
    }
  }
  at::AutoDispatchBelowAutograd guard;  // on to ADInplaceOrView
  op_inplace().call(x, y, sin, cos);
}

void rope_matrix_inplace_ad_inplace_or_view(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                                            const at::Tensor& cos) {
  refuse_x_requiring_grad(x);  // under inference_mode the Autograd kernel above does not run
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op_inplace().call(x, y, sin, cos);
  }
  torch::autograd::increment_version(x);
}

}  // namespace
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, Autograd, m) {
  m.impl("rope_matrix", &npu_ops_transformer_ext::rope_matrix_autograd);
  m.impl("rope_matrix_qk", &npu_ops_transformer_ext::rope_matrix_qk_autograd);
  m.impl("rope_matrix_", &npu_ops_transformer_ext::rope_matrix_inplace_autograd);
}

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, ADInplaceOrView, m) {
  m.impl("rope_matrix_", &npu_ops_transformer_ext::rope_matrix_inplace_ad_inplace_or_view);
}
