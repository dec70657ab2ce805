"""The operator's Python face: documented functional wrappers and the fake (meta) kernels.

The fake kernels let ``torch.compile(fullgraph=True)`` trace the ops without a graph break; they
mirror the checks of the shared C++ validator (validation/rope_matrix_validate.cpp) with
``torch._check`` so that a bad call fails the same way while tracing. Autograd lives in
``autograd.py``.
"""
from __future__ import annotations

import torch

_NS = "npu_ops_transformer_ext"
_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)

__all__ = ["rope_matrix", "rope_matrix_", "rope_matrix_qk"]


def rope_matrix(x: torch.Tensor, mat: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding as a matrix product: ``out = x * cos + (x @ mat) * sin``.

    Shapes:
        x:        ``[..., D]``, rank >= 2: BNSD ``[B, N, S, D]``, BSND ``[B, S, N, D]``, ``[S, D]``, ...;
                  any strides. dtype bfloat16, float16, float32 or float64.
        mat:      ``[D, D]`` rotate matrix (see ``get_half_matrix`` & co.), dtype x.dtype or float32.
        sin, cos: any shape that broadcasts to x with last dim D (``[S, D]``, ``[1, 1, S, D]``,
                  ``[1, S, 1, D]``, ``[B, 1, S, D]``, x's shape, ...), dtype x.dtype or float32.
        returns:  a new contiguous tensor of x's shape and dtype.

    Numerics: computed in float32 (float64 for float64 x) and rounded once to x.dtype, round to
    nearest even, as ``x*cos``, ``(x@mat)*sin``, then their sum (no fused multiply-add). When mat is
    a signed permutation ``x @ mat`` is exact and the result equals that formula bit for bit. For a
    general dense mat, ``x @ mat`` is accumulated in float32 and rounded to x.dtype before the
    elementwise step, as the NPU cube core writes it.
    """
    return torch.ops.npu_ops_transformer_ext.rope_matrix(x, mat, sin, cos)


def rope_matrix_qk(q, k, mat, sin, cos):
    """``rope_matrix`` on q and k in one call and one pass over the tables.

    Shapes: q ``[..., Hq, ..., D]`` and k ``[..., Hk, ..., D]`` may differ in head count (GQA/MQA);
    sin and cos must broadcast to both. Returns ``(q_out, k_out)``, new tensors.
    """
    return torch.ops.npu_ops_transformer_ext.rope_matrix_qk(q, k, mat, sin, cos)


def rope_matrix_(x, mat, sin, cos) -> None:
    """In-place ``rope_matrix``: ``x <- x * cos + (x @ mat) * sin``, same numerics; returns None.

    For inference: saves the output allocation. x may have any layout that does not overlap
    itself (packed-QKV views such as ``qkv[:, :, 0]``, strided slices, transposes); it must share
    no memory with mat, sin or cos (those may be expanded views: they are only read). Both are
    decided exactly from storages, offsets and strides; a refusal says which rule failed. Refuses
    a tensor that requires grad (autograd needs the original x).
    """
    torch.ops.npu_ops_transformer_ext.rope_matrix_(x, mat, sin, cos)


# ---- fake kernels -------------------------------------------------------------------------------


def _check_table(op, name, t, x, x_name):
    d = x.shape[-1]
    torch._check_type(
        t.dtype == x.dtype or t.dtype == torch.float32,
        lambda: f"{op}: {name} must have dtype {x.dtype} ({x_name}.dtype) or torch.float32, got {t.dtype}",
    )
    torch._check_value(
        1 <= t.dim() <= x.dim(),
        lambda: f"{op}: {name} must have rank 1..{x.dim()} and broadcast to {x_name} "
        f"{list(x.shape)}, got {list(t.shape)}",
    )
    torch._check_value(
        t.shape[-1] == d,
        lambda: f"{op}: {name} must have last dim D = {x_name}.size(-1) = {d}, got {list(t.shape)}",
    )
    off = x.dim() - t.dim()
    for i in range(t.dim()):
        torch._check_value(
            t.shape[i] == 1 or t.shape[i] == x.shape[off + i],
            lambda: f"{op}: {name} {list(t.shape)} does not broadcast to {x_name} {list(x.shape)}",
        )
    torch._check_value(
        t.device == x.device, lambda: f"{op}: {name} must be on {x_name}'s device {x.device}, got {t.device}"
    )


def check_inputs(op: str, x, y, sin, cos, x_name: str = "x") -> None:
    """The Python mirror of the C++ validator, for fake tensors and Python-side entry points."""
    torch._check_value(
        x.dim() >= 2, lambda: f"{op}: {x_name} must have rank >= 2 ([..., S, D]), got {list(x.shape)}"
    )
    torch._check_type(
        x.dtype in _X_DTYPES,
        lambda: f"{op}: {x_name} must have dtype bfloat16, float16, float32 or float64, got {x.dtype}",
    )
    d = x.shape[-1]
    torch._check_value(
        y.dim() == 2 and y.shape[0] == d and y.shape[1] == d,
        lambda: f"{op}: y must be [D, D] with D = {x_name}.size(-1) = {d}, got {list(y.shape)}",
    )
    torch._check_type(
        y.dtype == x.dtype or y.dtype == torch.float32,
        lambda: f"{op}: y must have dtype {x.dtype} ({x_name}.dtype) or torch.float32, got {y.dtype}",
    )
    torch._check_value(
        y.device == x.device, lambda: f"{op}: y must be on {x_name}'s device {x.device}, got {y.device}"
    )
    _check_table(op, "sin", sin, x, x_name)
    _check_table(op, "cos", cos, x, x_name)


@torch.library.register_fake(f"{_NS}::rope_matrix")
def _rope_matrix_fake(x, y, sin, cos):
    check_inputs("rope_matrix", x, y, sin, cos)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake(f"{_NS}::rope_matrix_qk")
def _rope_matrix_qk_fake(q, k, y, sin, cos):
    check_inputs("rope_matrix_qk", q, y, sin, cos, "q")
    check_inputs("rope_matrix_qk", k, y, sin, cos, "k")
    torch._check_type(
        q.dtype == k.dtype, lambda: f"rope_matrix_qk: q and k must have the same dtype, got {q.dtype} and {k.dtype}"
    )
    return (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
    )


def _concrete(*vals) -> bool:
    return all(isinstance(v, int) for v in vals)


def _overlaps_itself(x) -> bool | None:
    """Python mirror of ``internal_overlap`` (validation/): True/False, None when undecidable here
    (symbolic sizes) or too large to list (eager decides)."""
    sizes, strides = list(x.shape), list(x.stride())
    if not _concrete(*sizes, *strides):
        return None
    dims = sorted(((n, st) for n, st in zip(sizes, strides) if n > 1), key=lambda d: -d[1])
    if dims and dims[-1][1] == 0:
        return True
    while len(dims) > 1 and dims[0][1] > sum((n - 1) * st for n, st in dims[1:]):
        dims.pop(0)
    if len(dims) <= 1:
        return False
    count = 1
    for n, _ in dims:
        count *= n
    if count > 1 << 20:
        return None
    offs = {0}
    for n, st in dims:
        new = {o + i * st for o in offs for i in range(n)}
        if len(new) < len(offs) * n:
            return True
        offs = new
    return False


def check_inplace(op: str, x) -> None:
    """The in-place checks the fake kernel can make: x must not overlap itself. (Whether x shares
    memory with mat, sin or cos is decided on the real tensors, by every backend.)"""
    torch._check_value(
        _overlaps_itself(x) is not True,
        lambda: f"{op}: x overlaps itself (two of its elements are the same memory, e.g. an expanded "
        f"tensor, strides {tuple(x.stride())} for shape {list(x.shape)}), so it cannot be updated in "
        "place; use the out-of-place rope_matrix, or x.contiguous() first",
    )


@torch.library.register_fake(f"{_NS}::rope_matrix_")
def _rope_matrix_inplace_fake(x, y, sin, cos):
    check_inputs("rope_matrix_", x, y, sin, cos)
    check_inplace("rope_matrix_", x)
