"""Rotate matrices R for ``rope_matrix``: ``out = x * cos + (x @ R) * sin``.

Every builder returns a signed permutation (each row and each column holds exactly one entry, +1 or
-1), so ``x @ R`` only moves and negates elements: it is exact in any dtype, and the operator takes
its gather-free fused path and is bit-exact. Each builder takes ``dtype`` (a floating or signed
integer dtype: one that holds -1) and ``device``. The
default dtype is float32, as for the tables (``tables.py``): the operator takes a float32 matrix with
every x dtype, and a signed permutation in any dtype (its entries are exact everywhere).

In the docstrings, ``x1, x2 = x.chunk(2, -1)`` and ``rotate_half(x) = cat(-x2, x1)``;
``rotate_every_two(x)`` maps ``(x0, x1, x2, x3, ...)`` to ``(-x1, x0, -x3, x2, ...)``.
"""
from __future__ import annotations

import operator

import torch

from .ops import _PACKED

__all__ = [
    "compose_matrix",
    "get_half_matrix",
    "get_interleave_half_matrix",
    "get_interleave_matrix",
    "get_quarter_matrix",
    "is_signed_permutation",
]


_CACHED: dict = {}


def cached_matrix(build, d: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``build(d, dtype=, device=)`` made once per (builder, d, dtype, device), for the model and HF
    drop-ins; a normal tensor even when first made under torch.inference_mode() (the op saves mat
    for backward: an inference tensor in the cache would fail a later training call)."""
    key = (build, d, dtype, torch.device(device))
    m = _CACHED.get(key)
    if m is None:
        with torch.inference_mode(False):
            m = _CACHED[key] = build(d, dtype=dtype, device=device)
    return m


def _check_n(n: int, multiple: int, name: str, dtype: torch.dtype) -> int:
    """n as an int (any integral type: int, NumPy or 0-dim integer tensor); checks n and dtype."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"{name}: n must be an integer, got {type(n).__name__} {n!r}")
    n = operator.index(n)
    if n <= 0 or n % multiple:
        raise ValueError(f"{name}: n must be a positive multiple of {multiple}, got {n}")
    if not isinstance(dtype, torch.dtype) or dtype.is_complex or not dtype.is_signed or dtype in _PACKED:
        raise TypeError(
            f"{name}: dtype must be a real dtype that holds -1 (a floating dtype or a signed integer "
            f"dtype, not a packed one), got {dtype}"
        )
    return n


def get_interleave_matrix(
    n: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[n, n] rotate matrix of the interleave (GPT-J, "rotate_every_two") mode.

    ``R[2i, 2i+1] = 1`` and ``R[2i+1, 2i] = -1``, so ``x @ R == rotate_every_two(x)``: element pairs
    ``(2i, 2i+1)`` rotate together and the tables repeat each angle twice in a row
    (``cos = [c0, c0, c1, c1, ...]``). n must be even.
    """
    n = _check_n(n, 2, "get_interleave_matrix", dtype)
    m = torch.zeros(n, n, dtype=dtype, device=device)
    i = torch.arange(0, n, 2, device=device)
    m[i, i + 1] = 1
    m[i + 1, i] = -1
    return m


def get_half_matrix(
    n: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[n, n] rotate matrix of the half (GPT-NeoX, LLaMA, "rotate_half") mode.

    ``R[:n/2, n/2:] = I`` and ``R[n/2:, :n/2] = -I``, so ``x @ R == rotate_half(x) == cat(-x2, x1)``:
    element pairs ``(i, i + n/2)`` rotate together and the tables hold each angle in both halves
    (``cos = [c0 .. c(n/2-1), c0 .. c(n/2-1)]``). n must be even.
    """
    n = _check_n(n, 2, "get_half_matrix", dtype)
    h = n // 2
    m = torch.zeros(n, n, dtype=torch.float32)  # built in float32: not every dtype has neg (float8)
    eye = torch.eye(h)
    m[:h, h:] = eye
    m[h:, :h] = -eye
    return m.to(dtype=dtype, device=device)


def get_quarter_matrix(
    n: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[n, n] rotate matrix of the quarter mode: the half mode applied to each half of D.

    With ``x1, x2, x3, x4 = x.chunk(4, -1)``, ``x @ R == cat(-x2, x1, -x4, x3)``, i.e.
    ``R = compose_matrix(get_half_matrix(n/2), get_half_matrix(n/2))``: pairs ``(i, i + n/4)`` inside
    each half. n must be a multiple of 4.
    """
    n = _check_n(n, 4, "get_quarter_matrix", dtype)
    half = get_half_matrix(n // 2, dtype=dtype, device=device)
    return compose_matrix(half, half)


def get_interleave_half_matrix(
    n: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """[n, n] rotate matrix of the interleave-half mode: de-interleave, then rotate half.

    With ``perm = [0, 2, 4, ..., n-2, 1, 3, ..., n-1]`` (the even elements, then the odd ones),
    ``x @ R == rotate_half(x[..., perm])``: ``R = P @ get_half_matrix(n)`` where ``P`` is the
    permutation matrix with ``x @ P == x[..., perm]``. Entry-wise, for ``i < n/2``:
    ``R[2i+1, i] = -1`` and ``R[2i, i + n/2] = 1``. This is the rotated term of the mode that the
    CANN RotaryPositionEmbedding operator calls "interleave-half" (DeepSeek's interleaved weights
    rotated the half way). n must be even.
    """
    n = _check_n(n, 2, "get_interleave_half_matrix", dtype)
    perm = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)])
    p = torch.zeros(n, n, dtype=torch.float32)
    p[perm, torch.arange(n)] = 1
    return (p @ get_half_matrix(n, dtype=torch.float32)).to(dtype=dtype, device=device)


def compose_matrix(*mats: torch.Tensor) -> torch.Tensor:
    """Block-diagonal composition of rotate matrices: one matrix for 2D/3D RoPE.

    ``compose_matrix(Rh, Rw, Rt)`` is ``[[Rh, 0, 0], [0, Rw, 0], [0, 0, Rt]]``, so ``x @ R`` rotates
    the first ``Rh.size(0)`` elements of x with Rh, the next with Rw, and so on: the seed's 3D RoPE
    ``compose_3matrix(half_44, half_44, half_40)`` is ``compose_matrix(half_44, half_44, half_40)``.
    Takes any number (>= 1) of square matrices; the result has the dtype and device of the first.
    """
    if not mats:
        raise ValueError("compose_matrix: expected at least one matrix")
    for i, m in enumerate(mats):
        if m.dim() != 2 or m.size(0) != m.size(1):
            raise ValueError(f"compose_matrix: matrix {i} must be square [d, d], got {list(m.shape)}")
    return torch.block_diag(*[m.to(dtype=mats[0].dtype, device=mats[0].device) for m in mats])


def is_signed_permutation(mat: torch.Tensor) -> bool:
    """True when every row and every column of ``mat`` holds exactly one non-zero entry, +1 or -1.

    For such a matrix ``x @ mat`` is exact and ``rope_matrix`` is bit-exact against the fp32
    formula rounded once. (The CPU kernel also takes its fused path for a *partial* signed
    permutation, where a row/column may be all zero; this function answers the strict question.)
    """
    if mat.dim() != 2 or mat.size(0) != mat.size(1):
        return False
    m = mat.detach().to(torch.float64)
    nz = m != 0
    if not bool(torch.all((m == 0) | (m == 1) | (m == -1))):
        return False
    return bool(torch.all(nz.sum(0) == 1)) and bool(torch.all(nz.sum(1) == 1))
