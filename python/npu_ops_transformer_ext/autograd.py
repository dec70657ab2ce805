"""Autograd for ``rope_matrix`` and ``rope_matrix_qk``; the grad rule of ``rope_matrix_``.

The autograd kernels of ``rope_matrix`` and ``rope_matrix_qk`` are C++ (``rope_matrix_autograd.cpp``,
so that a call needing no gradient never enters Python); the formulas below are theirs, and this
module holds the x-gradient helper ops they call and the second derivatives.

Forward: ``out = x * cos + (x @ y) * sin`` (``y`` is the rotate matrix ``[D, D]``,
the ops' argument ``mat``, named ``y`` in the formulas and helpers here; ``sin``/``cos`` broadcast to x).

Gradients, with ``g = dL/dout`` and ``sum_b`` the sum over the dimensions a table is broadcast on:

    dx   = g * cos + (g * sin) @ y^T
    dcos = sum_b(g * x)
    dsin = sum_b(g * (x @ y))
    dy   = X^T @ (g * sin)                   (X, g*sin flattened to [M, D])

**dx in one kernel pass.** When ``sin`` is equal within each rotated pair (``sin[..., i]`` and
``sin[..., j]`` the same bits wherever ``y[i, j] != 0``, true for every table a RoPE model builds),
``(g * sin) @ y^T == (g @ y^T) * sin`` and ``dx = rope_matrix(g, y^T, sin, cos)``: one call of the
registered op, the same fused kernel as the forward on CPU and NPU. For a signed-permutation
``y`` with any other ``sin`` it is still one call, with ``sin`` gathered along the pairs
(``sin'[..., i] = sin[..., j]`` for the one ``j`` with ``y[i, j] != 0``), which is exact. Only a
dense ``y`` with a table that is not pair-constant takes the general formula (float32 math, float64
for float64 inputs). Choosing the path looks at the values of ``y`` and ``sin`` (one small host
copy of ``y``), so it lives in a helper op, ``rope_matrix_backward`` / ``rope_matrix_qk_backward``:
torch.compile traces through ``register_autograd`` formulas and keeps the helper as one opaque
node that makes the choice at run time.

**Table and matrix gradients** are plain torch (float32 math), with ``x @ y`` taken from the op
itself (``rope_matrix(x, y, 1, 0)``) so it is the ``x @ y`` of the forward (rounded to x's
dtype, as the kernel rounds it) wherever x is finite; its ``x * 0`` makes an infinite or NaN
``x[..., j]`` a NaN at j. ``x`` is saved for backward only when y, sin or cos requires grad.
Forward-mode AD is not implemented: the C++ autograd kernels refuse an input that carries a
forward-mode tangent, and the helper ops refuse a gradient that carries one (forward-over-reverse).

**Second derivatives.** The helper ops have autograd formulas of their own, composed of the
registered ops (the x-gradient of the x-gradient is the forward, ``rope_matrix(h, y, sin, cos)``;
its table gradients are the forward's table gradients with x and g swapped), and the table
gradients are differentiable torch ops; so double backward (and higher) is exact for x, y, sin
and cos, for every matrix and table form.

**In-place.** ``rope_matrix_`` is for inference. Its C++ kernels at the Autograd and
ADInplaceOrView dispatch keys (the second also runs inside ``torch.inference_mode()`` for a normal
tensor, where the first does not) refuse an ``x`` that requires grad, in any mode, and with grad
mode on a ``y``/``sin``/``cos`` that requires grad, with a message that names the argument; they
hold for ``torch.ops.npu_ops_transformer_ext.rope_matrix_`` as well as for the Python wrapper. The
ADInplaceOrView kernel bumps x's version counter, so a graph that saved x before the in-place
call fails loudly at backward instead of computing a wrong gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._bits import same_bits
from .ops import check_inputs

_NS = "npu_ops_transformer_ext"
_ops = torch.ops.npu_ops_transformer_ext

__all__ = ["pair_partner", "rope_matrix_backward", "rope_matrix_qk_backward", "sin_is_pair_equal"]


# ---- helpers ------------------------------------------------------------------------------------


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tree_sum(t: Tensor, dim: int, in_place: bool) -> Tensor:
    """Sum ``t`` along ``dim`` (kept, size 1) as a pairwise tree, as ``tree_sum`` in
    ``rope_matrix_autograd.cpp`` (the same pairs, the same bits): each element's order of
    additions depends on ``t.shape[dim]`` alone, so a sequence-parallel rank gets the bits of a
    single-process run. ``in_place``: add into ``t``'s first half level by level."""
    if t.shape[dim] == 0:
        return t.sum(dim=dim, keepdim=True)
    rest = []
    while t.shape[dim] > 1:
        n = t.shape[dim]
        h = n // 2
        if n % 2:
            rest.append(t.narrow(dim, n - 1, 1))
        if in_place:
            t.narrow(dim, 0, h).add_(t.narrow(dim, h, h))
            t = t.narrow(dim, 0, h)
        else:
            t = t.narrow(dim, 0, h) + t.narrow(dim, h, h)
    for r in rest:
        t = t.add_(r) if in_place else t + r
    return t


def _reduce_to(t: Tensor, shape) -> Tensor:
    """Sum ``t`` (x's shape; a temporary the caller gives up) down to ``shape``, a shape that
    broadcasts to it, dimension by dimension in ascending order, each with ``_tree_sum`` (as
    ``reduce_to`` in C++)."""
    # (an efficient zero tensor, the product with a zero grad_output, is immutable: out of place)
    in_place = not (torch.is_grad_enabled() and t.requires_grad) and not t._is_zerotensor()
    lead = t.dim() - len(shape)
    reduced = False
    for i in range(t.dim()):
        if (i < lead or shape[i - lead] == 1) and t.shape[i] != 1:
            t = _tree_sum(t, i, in_place)
            reduced = True
    if not reduced:
        return t.reshape(shape) if lead > 0 else t
    return t.reshape(shape).clone(memory_format=torch.contiguous_format) if in_place else t.reshape(shape)


def pair_partner(y: Tensor) -> Tensor | None:
    """For a (partial) signed permutation ``y``: ``p`` with ``y[i, p[i]] != 0`` (``p[i] = i`` for
    an all-zero row), as an int64 tensor on y's device. None when ``y`` is not one (entries outside
    {-1, 0, 1}, or a row or column with more than one non-zero). Reads ``y`` on the host."""
    m = y.detach().to("cpu", torch.float64)
    if m.dim() != 2 or m.size(0) != m.size(1):
        return None
    nz = m != 0
    if not bool(torch.all((m == 0) | (m.abs() == 1))):
        return None
    if bool(torch.any(nz.sum(0) > 1)) or bool(torch.any(nz.sum(1) > 1)):
        return None
    idx = torch.arange(m.size(0))
    p = torch.where(nz.any(1), m.abs().argmax(1), idx)
    return p.to(y.device)


def sin_is_pair_equal(y: Tensor, sin: Tensor) -> bool:
    """True when ``sin[..., i] == sin[..., j]`` wherever ``y[i, j] != 0``: the condition under which
    the x-gradient is the single call ``rope_matrix(g, y^T, sin, cos)``. Reads y and sin's values;
    equal means the same bits (a ``+0`` paired with a ``-0`` is not equal: the sign of a zero
    product would change)."""
    p = pair_partner(y)
    if p is not None:
        return same_bits(sin.index_select(-1, p), sin)
    rows, cols = (y.detach() != 0).nonzero(as_tuple=True)
    rows, cols = rows.to(sin.device), cols.to(sin.device)
    return same_bits(sin.index_select(-1, rows), sin.index_select(-1, cols))


def _dx_table(y: Tensor, sin: Tensor) -> Tensor | None:
    """The sin table to pass with ``y^T`` for an exact one-call x-gradient, or None (general path)."""
    p = pair_partner(y)
    if p is None:
        # A dense y: the pair check gathers the table once per non-zero; only worth it when sparse.
        if int((y != 0).sum()) <= 2 * y.size(0) and sin_is_pair_equal(y, sin):
            return sin
        return None
    gathered = sin.index_select(-1, p)
    return sin if same_bits(gathered, sin) else gathered


def _dx_general(g: Tensor, y: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    acc = _acc_dtype(g.dtype)
    g_ = g.to(acc)
    # contiguous, as the op's own result and the helper ops' fake kernels (g may have any strides)
    return (g_ * cos.to(acc) + (g_ * sin.to(acc)) @ y.to(acc).t()).to(g.dtype).contiguous()


# ---- helper ops: the x-gradient, with the path chosen on the values ----------------------------


# The schemas are in npu_ops_def.cpp with the others; the implementations (any device, composed of
# the registered ops) and the fake kernels are here.
_lib = torch.library.Library(_NS, "IMPL")


def _refuse_tangents(op: str, named) -> None:
    """The helper ops have no forward-mode formula, and ``register_autograd`` hands an input that
    carries a tangent but does not require grad straight to the implementation, which would drop
    the tangent (forward-over-reverse: ``torch.autograd.grad(out, x, make_dual(g, t))``): refused,
    naming the input, as the C++ autograd kernels refuse one on the forward ops."""
    for name, t in named:
        if isinstance(t, Tensor) and torch.autograd.forward_ad.unpack_dual(t).tangent is not None:
            raise RuntimeError(
                f"{op}: {name} carries a forward-mode tangent (torch.autograd.forward_ad, torch.func.jvp "
                f"or jacfwd); forward-mode AD is not supported, use reverse mode (backward(), "
                f"torch.autograd.grad)"
            )


def _check_backward(grad: Tensor, y: Tensor, sin: Tensor, cos: Tensor) -> None:
    """The forward's checks on the helper op's inputs, grad in the place of x."""
    check_inputs("rope_matrix_backward", grad, y, sin, cos, "grad")
    _refuse_tangents("rope_matrix_backward", (("grad", grad), ("mat", y), ("sin", sin), ("cos", cos)))


def _check_qk_backward(grad_q: Tensor, grad_k: Tensor, y: Tensor, sin: Tensor, cos: Tensor) -> None:
    op = "rope_matrix_qk_backward"
    check_inputs(op, grad_q, y, sin, cos, "grad_q")
    check_inputs(op, grad_k, y, sin, cos, "grad_k")
    _refuse_tangents(op, (("grad_q", grad_q), ("grad_k", grad_k), ("mat", y), ("sin", sin), ("cos", cos)))


def _rope_matrix_backward(grad: Tensor, y: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """x-gradient of ``rope_matrix``: ``grad * cos + (grad * sin) @ y^T`` (see the module doc)."""
    _check_backward(grad, y, sin, cos)
    if grad.numel() == 0:
        return torch.empty_like(grad, memory_format=torch.contiguous_format)
    yt = y.t().contiguous()
    s = _dx_table(y, sin)
    if s is not None:
        return _ops.rope_matrix(grad, yt, s, cos)
    return _dx_general(grad, y, sin, cos)


@torch.library.register_fake(f"{_NS}::rope_matrix_backward")
def _(grad, y, sin, cos):
    _check_backward(grad, y, sin, cos)
    return torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)


def _rope_matrix_qk_backward(
    grad_q: Tensor, grad_k: Tensor, y: Tensor, sin: Tensor, cos: Tensor
) -> tuple[Tensor, Tensor]:
    """x-gradients of ``rope_matrix_qk`` for q and k, in one ``rope_matrix_qk`` call when possible."""
    _check_qk_backward(grad_q, grad_k, y, sin, cos)
    if grad_q.numel() == 0 or grad_k.numel() == 0:  # nothing to move (D = 0 or an empty q or k)
        return _rope_matrix_backward(grad_q, y, sin, cos), _rope_matrix_backward(grad_k, y, sin, cos)
    yt = y.t().contiguous()
    s = _dx_table(y, sin)
    if s is not None:
        return _ops.rope_matrix_qk(grad_q, grad_k, yt, s, cos)
    return _dx_general(grad_q, y, sin, cos), _dx_general(grad_k, y, sin, cos)


@torch.library.register_fake(f"{_NS}::rope_matrix_qk_backward")
def _(grad_q, grad_k, y, sin, cos):
    _check_qk_backward(grad_q, grad_k, y, sin, cos)
    return (
        torch.empty(grad_q.shape, dtype=grad_q.dtype, device=grad_q.device),
        torch.empty(grad_k.shape, dtype=grad_k.dtype, device=grad_k.device),
    )


_lib.impl("rope_matrix_backward", _rope_matrix_backward, "CompositeExplicitAutograd")
_lib.impl("rope_matrix_qk_backward", _rope_matrix_qk_backward, "CompositeExplicitAutograd")
rope_matrix_backward = _ops.rope_matrix_backward
rope_matrix_qk_backward = _ops.rope_matrix_qk_backward


# ---- table / matrix gradients -------------------------------------------------------------------


def _rows(t: Tensor) -> Tensor:
    """``t`` as ``[M, D]`` rows: reshape (batched gradients can take it; flatten has no batching
    rule), flatten when D = 0 (``reshape(-1, 0)`` is ambiguous)."""
    return t.reshape(-1, t.shape[-1]) if t.shape[-1] > 0 else t.flatten(0, -2)


def _table_grads(pairs, y, sin, cos, need_y, need_sin, need_cos):
    """Sum of the y/sin/cos gradients over ``pairs`` = [(grad_out, x), ...] (a pair with a None is
    skipped). Differentiable: composed of torch ops and the registered ``rope_matrix``."""
    d = y.shape[0]
    dy = dsin = dcos = None
    for g, x in pairs:
        if g is None or x is None:
            continue
        acc = _acc_dtype(x.dtype)
        g_ = g.to(acc)
        if need_cos:
            t = _reduce_to(g_ * x, cos.shape)
            dcos = t if dcos is None else dcos + t
        if need_sin:
            one = torch.ones(d, dtype=torch.float32, device=x.device)
            xy = _ops.rope_matrix(x, y, one, torch.zeros_like(one))  # the forward's x @ y
            t = _reduce_to(g_ * xy, sin.shape)
            dsin = t if dsin is None else dsin + t
        if need_y:
            gs = _rows(g_ * sin.to(acc))  # [M, D]
            t = _rows(x.to(acc)).t() @ gs
            dy = t if dy is None else dy + t
    cast = lambda t, ref: None if t is None else t.to(ref.dtype)
    return cast(dy, y), cast(dsin, sin), cast(dcos, cos)


# ---- second derivatives: autograd of the backward helper ops -----------------------------------
#
# The x-gradient is the transpose of the forward: with F(x) = x*cos + (x@y)*sin (linear in x),
# rope_matrix_backward(g) = F^T(g) = g*cos + (g*sin)@y^T. Differentiating <h, F^T(g)> = <F(h), g>:
#   d/dg                = F(h) = rope_matrix(h, y, sin, cos)       (the forward op itself)
#   d/dy, d/dsin, d/dcos = the forward's table gradients at x = h with upstream gradient g,
# so the backward of the backward composes registered ops and differentiates again (any order).


def _setup_context_bw(ctx, inputs, output):
    grad, y, sin, cos = inputs
    keep = y.requires_grad or sin.requires_grad or cos.requires_grad
    ctx.save_for_backward(grad if keep else None, y, sin, cos)


def _backward_bw(ctx, h):
    grad, y, sin, cos = ctx.saved_tensors
    need_g, need_y, need_sin, need_cos = ctx.needs_input_grad
    dg = _ops.rope_matrix(h, y, sin, cos) if need_g else None
    dy = dsin = dcos = None
    if need_y or need_sin or need_cos:
        dy, dsin, dcos = _table_grads([(grad, h)], y, sin, cos, need_y, need_sin, need_cos)
    return dg, dy, dsin, dcos


torch.library.register_autograd(
    f"{_NS}::rope_matrix_backward", _backward_bw, setup_context=_setup_context_bw
)


def _setup_context_qk_bw(ctx, inputs, output):
    grad_q, grad_k, y, sin, cos = inputs
    keep = y.requires_grad or sin.requires_grad or cos.requires_grad
    ctx.save_for_backward(grad_q if keep else None, grad_k if keep else None, y, sin, cos)


def _backward_qk_bw(ctx, hq, hk):
    grad_q, grad_k, y, sin, cos = ctx.saved_tensors
    need_gq, need_gk, need_y, need_sin, need_cos = ctx.needs_input_grad
    dgq = dgk = None
    if need_gq and need_gk and hq is not None and hk is not None:
        dgq, dgk = _ops.rope_matrix_qk(hq, hk, y, sin, cos)
    else:
        if need_gq and hq is not None:
            dgq = _ops.rope_matrix(hq, y, sin, cos)
        if need_gk and hk is not None:
            dgk = _ops.rope_matrix(hk, y, sin, cos)
    dy = dsin = dcos = None
    if need_y or need_sin or need_cos:
        dy, dsin, dcos = _table_grads(
            [(grad_q, hq), (grad_k, hk)], y, sin, cos, need_y, need_sin, need_cos
        )
    return dgq, dgk, dy, dsin, dcos


torch.library.register_autograd(
    f"{_NS}::rope_matrix_qk_backward", _backward_qk_bw, setup_context=_setup_context_qk_bw
)


# ---- rope_matrix, rope_matrix_qk, rope_matrix_ -------------------------------------------------
#
# Their autograd kernels are registered in C++ (rope_matrix_autograd.cpp, the same formulas as
# ``_table_grads`` and the helper ops above, and the in-place op's refusal rule described in the
# module doc): a call that needs no gradient goes straight to the kernel without entering Python,
# which at decode sizes cost more than the kernel itself.
