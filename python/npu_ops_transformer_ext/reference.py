"""Plain-torch references for rope_matrix, shared by the tests, the precision script and the benchmark.

``rope_matrix_reference`` is the contract itself: it upcasts to float32 (float64 for float64 x)
because the operator promises fp32 math with a single rounding to x.dtype at the end; computing in
bf16 would round after every op and differ from the contract by design, not by error. For a dense
``mat`` it fixes one accumulation order (torch's matmul), which the operator does not promise to
follow: there results agree within rounding, and an Inf from a partial sum that overflows in one
order may be a finite value in the other.

The ``v1``/``v2``/``v3`` functions are the original operator's script versions (seed ``test_rope.py``)
for any number of RoPE axes: v1 rearranges elements (split, rotate_half or rotate_every_two,
concat), v2 multiplies each axis by its own rotate matrix, v3 multiplies once by the composed
matrix. With ``compute_dtype=torch.float32`` (the default) they also round once, so for a signed
permutation and finite x all of them equal ``rope_matrix_reference`` and the operator bit for bit
(v2/v3 multiply, so a non-finite x spreads through ``Inf * 0`` and -0 can become +0); with
``compute_dtype=None`` they compute in x.dtype, rounding after every op, as the seed script did.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .matrices import (
    compose_matrix,
    get_half_matrix,
    get_interleave_half_matrix,
    get_interleave_matrix,
    get_quarter_matrix,
)

__all__ = [
    "MODES",
    "mode_matrix",
    "rope_matrix_reference",
    "rope_v1",
    "rope_v2",
    "rope_v3",
    "rotate_by_matrix",
    "rotate_every_two",
    "rotate_half",
    "rotate_interleave_half",
    "rotate_quarter",
    "signed_permutation_columns",
]

MODES = ("half", "interleave", "quarter", "interleave-half")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def signed_permutation_columns(
    y: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``(src, neg, live)`` for a (partial) signed permutation ``y``, or None for any other y.

    A (partial) signed permutation has entries in {-1, 0, +1} and at most one non-zero in each row
    and each column. Then ``(x @ y)[..., j] = -x[..., src[j]]`` where ``neg[j]``, ``+x[..., src[j]]``
    otherwise, and ``+0`` for an all-zero column (``live[j]`` False). Reads y on the host.
    """
    if y.dim() != 2 or y.size(0) != y.size(1):
        return None
    m = y.detach().to("cpu", torch.float64)
    nz = m != 0
    if not bool(torch.all(~nz | (m == 1) | (m == -1))):
        return None  # includes NaN entries
    if bool(torch.any(nz.sum(0) > 1)) or bool(torch.any(nz.sum(1) > 1)):
        return None
    live = nz.any(0)
    src = torch.where(live, nz.to(torch.int8).argmax(0), 0)
    neg = (m.gather(0, src.unsqueeze(0)).squeeze(0) < 0) & live
    return src.to(y.device), neg.to(y.device), live.to(y.device)


def rotate_by_matrix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x @ y`` as the contract defines it, in x's dtype (x already in the compute dtype).

    * ``y`` a (partial) signed permutation: an exact move and negation of elements, not a matmul.
      Every value reaches only its partner column: Inf stays Inf, -0 stays -0, a NaN reaches only its
      partner; an all-zero column gives +0.
    * any other ``y``: ``torch.matmul``, IEEE arithmetic with round to nearest even and no flush of
      subnormals. A non-finite element of a row spreads to that row's whole product (``Inf * 0`` is
      NaN), the sign of an exactly-zero sum is not specified (``-0 + +0 = +0``) and the order of
      accumulation is not specified, so backends agree within the dtype's rounding, not bit for bit.
    """
    return _rotate(x, y, signed_permutation_columns(y))


def _rotate(x: torch.Tensor, y: torch.Tensor, cols) -> torch.Tensor:
    if cols is None:
        return x @ y.to(x.dtype)
    src, neg, live = cols
    moved = x.index_select(-1, src)
    if bool(neg.any()):
        # times -1: an exact negation of every value (+-0, +-Inf and subnormals included)
        moved.mul_(torch.where(neg, -1.0, 1.0).to(x.dtype))
    if not bool(live.all()):
        moved.masked_fill_(~live, 0.0)
    return moved


def rope_matrix_reference(x: torch.Tensor, y: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """The contract in plain torch: ``x*cos + (x@y)*sin`` in fp32, rounded once to x.dtype
    (``y`` is the rotate matrix, the op's ``mat``; arguments in the op's order x, mat, sin, cos).

    ``x @ y`` is :func:`rotate_by_matrix`: for a (partial) signed permutation an exact move and
    negation of elements (so Inf, -0 and NaN stay where the permutation puts them); for a dense y a
    matmul accumulated in fp32 (fp64 for fp64 x) and rounded to x.dtype before the elementwise step
    (the NPU cube writes x.dtype to its workspace). The three elementwise ops are separate torch
    ops, so no fused multiply-add is involved; IEEE arithmetic throughout, subnormals kept.
    """
    c = _compute_dtype(x.dtype)
    xf = x.to(c)
    cols = signed_permutation_columns(y)
    xy = _rotate(xf, y.to(c), cols)
    if cols is None:
        xy = xy.to(x.dtype).to(c)  # (a moved element of x is already exact in x.dtype)
    return (xf * cos.to(c) + xy * sin.to(c)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1)`` with ``x1, x2 = x.chunk(2, -1)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """``(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)``."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def rotate_quarter(x: torch.Tensor) -> torch.Tensor:
    """``cat(-x2, x1, -x4, x3)`` with ``x1, x2, x3, x4 = x.chunk(4, -1)``."""
    x1, x2, x3, x4 = x.chunk(4, dim=-1)
    return torch.cat((-x2, x1, -x4, x3), dim=-1)


def rotate_interleave_half(x: torch.Tensor) -> torch.Tensor:
    """``rotate_half(cat(x[..., 0::2], x[..., 1::2]))``: de-interleave, then rotate half."""
    return rotate_half(torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1))


_ROTATE = {
    "half": rotate_half,
    "interleave": rotate_every_two,
    "quarter": rotate_quarter,
    "interleave-half": rotate_interleave_half,
}

_MATRIX = {
    "half": get_half_matrix,
    "interleave": get_interleave_matrix,
    "quarter": get_quarter_matrix,
    "interleave-half": get_interleave_half_matrix,
}


def mode_matrix(
    mode: str,
    sections: Sequence[int],
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The composed rotate matrix of ``mode`` over ``sections`` (e.g. ``[44, 44, 40]`` for 3D)."""
    if mode not in _MATRIX:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return compose_matrix(*[_MATRIX[mode](int(d), dtype=dtype, device=device) for d in sections])


def _split(t: torch.Tensor, sections: Sequence[int]):
    return t.split(list(sections), dim=-1)


def rope_v1(
    x: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    mode: str,
    sections: Sequence[int] | None = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Seed v1, small ops: split D by ``sections``, rotate each part by element rearrangement, concat."""
    sections = [x.shape[-1]] if sections is None else list(sections)
    rot = _ROTATE[mode]
    c = compute_dtype or x.dtype
    parts = []
    for xp, sp, cp in zip(_split(x.to(c), sections), _split(sin.to(c), sections), _split(cos.to(c), sections)):
        parts.append(xp * cp + rot(xp) * sp)
    return torch.cat(parts, dim=-1).to(x.dtype)


def rope_v2(
    x: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    mats: Sequence[torch.Tensor],
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Seed v2, one rotate matrix per axis: ``x_i*cos_i + (x_i @ mat_i)*sin_i`` per part, concat."""
    sections = [m.shape[0] for m in mats]
    c = compute_dtype or x.dtype
    parts = []
    for xp, sp, cp, m in zip(_split(x.to(c), sections), _split(sin.to(c), sections), _split(cos.to(c), sections), mats):
        parts.append(xp * cp + (xp @ m.to(c)) * sp)
    return torch.cat(parts, dim=-1).to(x.dtype)


def rope_v3(
    x: torch.Tensor,
    sin: torch.Tensor,
    cos: torch.Tensor,
    mat: torch.Tensor,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Seed v3, one composed matrix: ``x*cos + (x @ mat)*sin``."""
    c = compute_dtype or x.dtype
    xc = x.to(c)
    return (xc * cos.to(c) + (xc @ mat.to(c)) * sin.to(c)).to(x.dtype)
