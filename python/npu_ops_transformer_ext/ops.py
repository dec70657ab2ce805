"""The operator's Python face: documented functional wrappers and the fake (meta) kernels.

The fake kernels let ``torch.compile(fullgraph=True)`` trace the ops without a graph break; they
mirror the checks of the shared C++ validator (validation/rope_matrix_validate.cpp) with
``torch._check`` so that a bad call fails with the same message while tracing (PyTorch raises it
as its own ``TorchRuntimeError`` there). Autograd is registered in C++
(``rope_matrix_autograd.cpp``; its helper ops and formulas are in ``autograd.py``), and so is
``rope_matrix_``'s functionalization (``rope_matrix_functionalize.cpp``).
"""
from __future__ import annotations

import torch

_NS = "npu_ops_transformer_ext"
_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)

__all__ = ["rope_matrix", "rope_matrix_", "rope_matrix_qk"]



def _one_or(n: int) -> str:
    """What a broadcasting table dim may be against an x dim of size n."""
    return "1" if n == 1 else f"1 or {n}"

def rope_matrix(x: torch.Tensor, mat: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """RoPE ``(x, mat, sin, cos)``: x ``[..., D]``, mat ``[D, D]``, sin/cos broadcast to x -> ``x * cos + (x @ mat) * sin``.

    The order is the operator's: **sin before cos** (HF transformers, flash-attn and diffusers pass
    cos first). Pass the tables by keyword, ``rope_matrix(x, mat, sin=sin, cos=cos)``, so that a
    swap shows in review; the registered op ``torch.ops.npu_ops_transformer_ext.rope_matrix`` takes
    the same keywords.

    Shapes:
        x:        ``[..., D]``, rank >= 2: BNSD ``[B, N, S, D]``, BSND ``[B, S, N, D]``, ``[S, D]``, ...;
                  any strides. dtype bfloat16, float16, float32 or float64.
        mat:      ``[D, D]`` rotate matrix (see ``get_half_matrix`` & co.). dtype x.dtype or float32
                  (used as given), or any other floating or integer dtype whose entries x.dtype
                  holds exactly (checked on the values, then converted to x.dtype): a signed
                  permutation in any dtype is accepted.
        sin, cos: any shape that broadcasts to x with last dim D (``[S, D]``, ``[1, 1, S, D]``,
                  ``[1, S, 1, D]``, ``[B, 1, S, D]``, x's shape, ...). Any floating dtype: x.dtype
                  and float32 are used as given; any other is converted to float32 once (exact
                  from bfloat16/float16; float64 is rounded to the nearest float32, ties to even),
                  so float64 tables give the same bits as ``sin.float()``, ``cos.float()``.
        returns:  a new contiguous tensor of x's shape and dtype.

    Numerics: computed in float32 (float64 for float64 x) and rounded once to x.dtype, round to
    nearest even, as ``x*cos``, ``(x@mat)*sin``, then their sum (no fused multiply-add). When mat is
    a signed permutation ``x @ mat`` is exact and the result equals that formula bit for bit. For a
    general dense mat, ``x @ mat`` is accumulated in float32 and rounded to x.dtype before the
    elementwise step, as the NPU cube core writes it.
    """
    return torch.ops.npu_ops_transformer_ext.rope_matrix(x, mat, sin, cos)


def rope_matrix_qk(
    q: torch.Tensor, k: torch.Tensor, mat: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on q and k ``(q, k, mat, sin, cos)``: q/k ``[..., D]``, mat ``[D, D]``, sin/cos broadcast to both.

    ``rope_matrix`` on q and k in one call and one pass over the tables; sin before cos, as in
    ``rope_matrix`` (pass them by keyword: ``rope_matrix_qk(q, k, mat, sin=sin, cos=cos)``).

    Shapes: q ``[..., Hq, ..., D]`` and k ``[..., Hk, ..., D]`` may differ in head count (GQA/MQA);
    sin and cos must broadcast to both. Returns ``(q_out, k_out)``, new tensors.
    """
    return torch.ops.npu_ops_transformer_ext.rope_matrix_qk(q, k, mat, sin, cos)


def rope_matrix_(x: torch.Tensor, mat: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> None:
    """In-place RoPE ``(x, mat, sin, cos)``: x ``[..., D]``, mat ``[D, D]``, sin/cos broadcast to x; ``x <- x * cos + (x @ mat) * sin``.

    Same numerics as ``rope_matrix``; returns None. sin before cos (pass them by keyword).

    For inference: saves the output allocation. x may have any layout that does not overlap
    itself (packed-QKV views such as ``qkv[:, :, 0]``, strided slices, transposes); it must share
    no memory with mat, sin or cos (those may be expanded views: they are only read). Both are
    decided exactly from storages, offsets and strides; a refusal says which rule failed. Refuses
    a tensor that requires grad (autograd needs the original x).

    Under ``torch.compile`` and ``torch.export`` it is traced as the value it writes (a private op
    with the same rules and bits) written back into x through x's views.
    """
    torch.ops.npu_ops_transformer_ext.rope_matrix_(x, mat, sin, cos)


# ---- fake kernels -------------------------------------------------------------------------------


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"torch.bfloat16"`` (the spelling of every message)."""
    return str(dtype)


def _x_dtype_or_float(x_dtype, x_name) -> str:
    s = f"{dtype_name(x_dtype)} ({x_name}.dtype)"
    return s if x_dtype == torch.float32 else s + " or torch.float32"


# Packed dtypes hold several values per element and have no conversion to float32.
_PACKED = tuple(d for d in (getattr(torch, "float4_e2m1fn_x2", None),) if d is not None)
# The integer dtypes c10::isIntegralType counts (bool, the bits and the sub-byte types are not).
_INTEGER = tuple(d for d in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                             getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                             getattr(torch, "uint64", None)) if d is not None)


def _check_not_packed(op, name, dtype, x_name):
    torch._check_type(
        dtype not in _PACKED,
        lambda: f"{op}: {name} has the packed dtype {dtype_name(dtype)} (two values per element), which "
        f"does not convert to float32; unpack it to a floating dtype (e.g. {x_name}.dtype) first",
    )


def _check_table(op, name, t, x, x_name):
    d = x.shape[-1]
    torch._check_type(
        t.dtype.is_floating_point,
        lambda: f"{op}: {name} must have a floating dtype (e.g. torch.float32 or {x_name}.dtype), got "
        f"{dtype_name(t.dtype)}; pass {name}.float()",
    )
    _check_not_packed(op, name, t.dtype, x_name)
    torch._check_value(
        1 <= t.dim() <= x.dim(),
        lambda: f"{op}: {name} must have rank 1..{x.dim()} ({x_name} has rank {x.dim()}) and broadcast to "
        f"{x_name} {list(x.shape)}, got {list(t.shape)}",
    )
    torch._check_value(
        t.shape[-1] == d,
        lambda: f"{op}: {name} must have last dim D = {x_name}.size(-1) = {d}, got {list(t.shape)}",
    )
    off = x.dim() - t.dim()
    for i in range(t.dim()):
        torch._check_value(
            t.shape[i] == 1 or t.shape[i] == x.shape[off + i],
            lambda i=i: f"{op}: {name} {list(t.shape)} does not broadcast to {x_name} {list(x.shape)}: "
            f"dim {i} "
            f"is {t.shape[i]}, expected {_one_or(x.shape[off + i])} (dims align from the right; "
            f"for_layout({name}, layout) views an [S, D] table for a BNSD, BSND or SBND {x_name})",
        )
    torch._check_value(
        t.device == x.device,
        lambda: f"{op}: {name} must be on {x_name}'s device {x.device}, got {t.device}; "
        f"pass {name}.to({x_name}.device)",
    )


def check_defined(op: str, named) -> None:
    """The validator's check_defined: None passed for a Tensor argument (torch.ops lets it through)
    is refused, naming the first such argument of ``named`` ((name, value) pairs)."""
    for name, t in named:
        torch._check_value(t is not None, lambda name=name: f"{op}: {name} must be a tensor, got None")


def check_inputs(
    op: str, x: torch.Tensor, mat: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, x_name: str = "x"
) -> None:
    """The Python mirror of the C++ validator (validation/), for fake tensors: the same checks in
    the same order, with the same messages."""
    check_defined(op, ((x_name, x), ("mat", mat), ("sin", sin), ("cos", cos)))
    torch._check_value(
        x.dim() >= 2, lambda: f"{op}: {x_name} must have rank >= 2 ([..., S, D]), got {list(x.shape)}"
    )
    torch._check_type(
        x.dtype in _X_DTYPES,
        lambda: f"{op}: {x_name} must have dtype torch.bfloat16, torch.float16, torch.float32 or "
        f"torch.float64, got {dtype_name(x.dtype)}; pass {x_name}.float()",
    )
    d = x.shape[-1]
    torch._check_value(
        mat.dim() == 2 and mat.shape[0] == d and mat.shape[1] == d,
        lambda: f"{op}: mat must be [D, D] with D = {x_name}.size(-1) = {d}, got {list(mat.shape)}; "
        + (f"build it for D, e.g. get_half_matrix({d})" if d > 0 and d % 2 == 0
           else f"pass a [{d}, {d}] mat (the mode builders need an even D > 0)"),
    )
    # Another floating or integer dtype is taken when x.dtype holds every entry exactly: the backends
    # check that on the values (a fake tensor has none).
    torch._check_type(
        mat.dtype.is_floating_point or mat.dtype in _INTEGER,
        lambda: f"{op}: mat must have dtype {_x_dtype_or_float(x.dtype, x_name)} (or another floating or "
        f"integer dtype whose entries {x_name}.dtype holds exactly), got {dtype_name(mat.dtype)}; "
        f"pass mat.to({x_name}.dtype)",
    )
    _check_not_packed(op, "mat", mat.dtype, x_name)
    torch._check_value(
        mat.device == x.device,
        lambda: f"{op}: mat must be on {x_name}'s device {x.device}, got {mat.device}; "
        f"pass mat.to({x_name}.device)",
    )
    _check_table(op, "sin", sin, x, x_name)
    _check_table(op, "cos", cos, x, x_name)


@torch.library.register_fake(f"{_NS}::rope_matrix")
def _rope_matrix_fake(x, mat, sin, cos):
    check_inputs("rope_matrix", x, mat, sin, cos)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake(f"{_NS}::_rope_matrix_inplace_value")
def _rope_matrix_inplace_value_fake(x, mat, sin, cos):
    check_inputs("rope_matrix_", x, mat, sin, cos)
    check_inplace("rope_matrix_", x, (("mat", mat), ("sin", sin), ("cos", cos)))
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake(f"{_NS}::rope_matrix_qk")
def _rope_matrix_qk_fake(q, k, mat, sin, cos):
    check_defined("rope_matrix_qk", (("q", q), ("k", k), ("mat", mat), ("sin", sin), ("cos", cos)))
    check_inputs("rope_matrix_qk", q, mat, sin, cos, "q")
    torch._check_value(
        k.dim() < 2 or k.shape[-1] == q.shape[-1],
        lambda: f"rope_matrix_qk: q and k must have the same last dim D, got q {list(q.shape)} and k {list(k.shape)}",
    )
    torch._check_type(
        q.dtype == k.dtype, lambda: f"rope_matrix_qk: q and k must have the same dtype, got {dtype_name(q.dtype)} and "
        f"{dtype_name(k.dtype)}; pass k.to(q.dtype)"
    )
    check_inputs("rope_matrix_qk", k, mat, sin, cos, "k")
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
        if any(isinstance(n, int) and n == 0 for n in sizes):
            return False
        # A backed symbolic size is >= 2 (dynamic shapes specialise 0 and 1), so an expanded dim
        # (stride 0) still decides it, once no size can be 0 (an unbacked one may: no elements);
        # anything else is left to eager. (Imported here: it pulls in sympy.)
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        if not all(isinstance(n, int) or statically_known_true(n != 0) for n in sizes):
            return None
        for n, st in zip(sizes, strides):
            if isinstance(st, int) and st == 0 and (n > 1 if isinstance(n, int) else statically_known_true(n > 1)):
                return True
        return None
    if 0 in sizes:  # no elements, none shared (an expanded empty view too)
        return False
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


def _byte_runs(t, cap: int):
    """Sorted, merged ``[start, end)`` byte runs of ``t`` in its storage, or None when there would
    be more than ``cap`` (or the sizes are symbolic). Zero strides add no address."""
    sizes, strides, off = list(t.shape), list(t.stride()), t.storage_offset()
    if not _concrete(*sizes, *strides, off):
        return None
    elem = t.element_size()
    dims = sorted(((n, st * elem) for n, st in zip(sizes, strides) if n > 1 and st != 0), key=lambda d: -d[1])
    run = elem
    while dims and dims[-1][1] == run:
        run *= dims[-1][0]
        dims.pop()
    count = 1
    for n, _ in dims:
        count *= n
        if count > cap:
            return None
    starts = [off * elem]
    for n, st in dims:
        starts = [b + i * st for b in starts for i in range(n)]
    merged = []
    for a in sorted(starts):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], a + run)
        else:
            merged.append([a, a + run])
    return merged


def _no_elements(t) -> bool:
    """Whether t is known to have no elements, without a guard: a data-dependent (unbacked) size
    may or may not be 0, and asking would stop the trace."""
    n = t.numel()
    if isinstance(n, int):
        return n == 0
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return statically_known_true(n == 0)


def _shares_memory(x, t) -> bool | None:
    """Python mirror of ``shared_memory`` (validation/): whether x and t have a byte in common;
    None when undecidable here (symbolic sizes, or too many runs to list: eager decides)."""
    if _no_elements(x) or _no_elements(t) or not torch._C._is_alias_of(x, t):
        return False
    a, b = _byte_runs(x, 1 << 20), _byte_runs(t, 1 << 20)
    if a is None or b is None:
        return None
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] < b[j][1] and b[j][0] < a[i][1]:
            return True
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return False


def check_inplace(op: str, x: torch.Tensor, others: tuple = ()) -> None:
    """The in-place checks the fake kernel can make: x must not be an inference tensor outside
    inference mode, nor overlap itself, nor share memory with ``others`` (``(name, tensor)`` pairs:
    mat, sin, cos), as far as sizes and strides are known at trace time; the backends decide again on
    the real tensors."""
    torch._check(
        not x.is_inference() or torch.is_inference_mode_enabled(),
        lambda: f"{op}: x is an inference tensor (made under torch.inference_mode()), which cannot be "
        "updated in place outside inference mode; call it under torch.inference_mode(), or pass x.clone()",
    )
    torch._check_value(
        _overlaps_itself(x) is not True,
        lambda: f"{op}: x overlaps itself (two of its elements are the same memory, e.g. an expanded "
        f"tensor, strides {tuple(x.stride())} for shape {list(x.shape)}), so it cannot be updated in "
        "place; use the out-of-place rope_matrix, or x.contiguous() first",
    )
    for name, t in others:
        torch._check_value(
            _shares_memory(x, t) is not True,
            lambda name=name: f"{op}: x shares memory with {name} (some of their elements are the same "
            f"bytes of memory), so updating x in place would change {name} while it is read; pass "
            f"{name}.clone(), or use the out-of-place rope_matrix",
        )


@torch.library.register_fake(f"{_NS}::rope_matrix_")
def _rope_matrix_inplace_fake(x, mat, sin, cos):
    check_inputs("rope_matrix_", x, mat, sin, cos)
    check_inplace("rope_matrix_", x, (("mat", mat), ("sin", sin), ("cos", cos)))
