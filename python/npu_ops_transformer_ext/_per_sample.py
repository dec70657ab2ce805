"""The package's own calls of the ops where the tables may differ per sample.

The model drop-ins and ``RotaryEmbedding`` build per-sample tables (``[B, 1, S, D]``,
``[B, S, 1, D]``) when positions differ between the rows of a batch. The CPU kernel takes any
tables that broadcast to x; the NPU kernel takes tables that vary along one dim of x only. So off
the CPU such a call runs slice by slice over every dim of x the tables vary along but the longest
(sample by sample along B for the shapes above; over B and H for ``[B, H, S, D]`` tables), each
slice's tables varying along one dim; anywhere else it is one call.
"""
from __future__ import annotations

import itertools

import torch
from torch import Tensor

from .ops import rope_matrix, rope_matrix_qk

__all__ = ["rope", "rope_qk"]


def _one_table_dim_only(device: torch.device) -> bool:
    """Whether the kernel for ``device`` takes only tables that vary along one dim of x."""
    return device.type != "cpu"


def _loop_dims(x: Tensor, tables: tuple[Tensor, ...]) -> list[int]:
    """The dims of x to go through slice by slice: off the CPU, every dim of x (aligned from the
    right) along which a table varies, except the longest such dim; none when that is all one dim
    (or on the CPU). A table that does not broadcast to x leaves it to the op to refuse."""
    if not _one_table_dim_only(x.device) or x.numel() == 0:
        return []
    r = x.dim()
    dims: set[int] = set()
    for t in tables:
        off = r - t.dim()
        if off < 0:
            return []
        for i, n in enumerate(t.shape[:-1]):
            if n != 1:
                if n != x.shape[off + i]:
                    return []
                dims.add(off + i)
    # The dim kept in each call is the longest (S, as a rule), so the calls are few and each has
    # rows to spread over the cores; the others are walked.
    keep = max(dims, key=lambda d: (x.shape[d], d)) if dims else None
    return sorted(d for d in dims if d != keep)


def _narrow(t: Tensor, rank: int, index: tuple[tuple[int, int], ...]) -> Tensor:
    """``t``'s part for the slice of an x of ``rank`` dims given as ``(dim, i)`` pairs: x's own
    slice for ``t = x`` (its walked dims are longer than 1), a table's where it varies."""
    off = rank - t.dim()
    for d, i in index:
        if d >= off and t.shape[d - off] > 1:
            t = t.narrow(d - off, i, 1)
    return t


def _slices(x: Tensor, dims: list[int]):
    """Every slice of ``dims`` of x, as ``(dim, i)`` pairs, in row-major order."""
    return [tuple(zip(dims, idx)) for idx in itertools.product(*(range(x.shape[d]) for d in dims))]


def _assemble(parts: list[Tensor], shape: torch.Size, dims: list[int]) -> Tensor:
    """The slices (in ``_slices`` order) put back together into one tensor of ``shape``."""
    for d in reversed(dims):
        n = shape[d]
        parts = [torch.cat(parts[j : j + n], d) for j in range(0, len(parts), n)]
    return parts[0]


def rope(x: Tensor, mat: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """``rope_matrix(x, mat, sin, cos)``, slice by slice off the CPU when the tables vary along
    more than one dim of x."""
    dims = _loop_dims(x, (sin, cos))
    if not dims:
        return rope_matrix(x, mat, sin, cos)
    r = x.dim()
    parts = [rope_matrix(_narrow(x, r, s), mat, _narrow(sin, r, s), _narrow(cos, r, s)) for s in _slices(x, dims)]
    return _assemble(parts, x.shape, dims)


def rope_qk(q: Tensor, k: Tensor, mat: Tensor, sin: Tensor, cos: Tensor) -> tuple[Tensor, Tensor]:
    """``rope_matrix_qk(q, k, mat, sin, cos)``, slice by slice off the CPU when the tables vary
    along more than one dim of q and k (q and k of the same sizes along those dims)."""
    dims = _loop_dims(q, (sin, cos))
    if not dims or k.dim() != q.dim() or any(k.shape[d] != q.shape[d] for d in dims):
        return rope_matrix_qk(q, k, mat, sin, cos)
    r = q.dim()
    outs = [
        rope_matrix_qk(_narrow(q, r, s), _narrow(k, r, s), mat, _narrow(sin, r, s), _narrow(cos, r, s))
        for s in _slices(q, dims)
    ]
    return _assemble([o[0] for o in outs], q.shape, dims), _assemble([o[1] for o in outs], k.shape, dims)
