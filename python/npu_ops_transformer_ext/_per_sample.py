"""The package's own calls of the ops where the tables may differ per sample.

The model drop-ins and ``RotaryEmbedding`` build per-sample tables (``[B, 1, S, D]``,
``[B, S, 1, D]``) when positions differ between the rows of a batch. The CPU kernel takes any
tables that broadcast to x; the NPU kernel takes tables that vary along one dim of x only. So off
the CPU such a call runs sample by sample along x's first dim, each sample's tables varying along
one dim; anywhere else it is one call.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .ops import rope_matrix, rope_matrix_qk

__all__ = ["rope", "rope_qk"]


def _one_table_dim_only(device: torch.device) -> bool:
    """Whether the kernel for ``device`` takes only tables that vary along one dim of x."""
    return device.type != "cpu"


def _varying_dims(t: Tensor) -> int:
    """The dims of ``t`` before the last where it is not of size 1."""
    return sum(1 for n in t.shape[:-1] if n != 1)


def _split(x: Tensor, tables: tuple[Tensor, ...]) -> bool:
    """Whether to go sample by sample: off the CPU, a table that varies along x's first dim and
    another one."""
    return (
        _one_table_dim_only(x.device)
        and x.dim() >= 2
        and x.shape[0] > 1
        and any(t.dim() == x.dim() and t.shape[0] > 1 and _varying_dims(t) > 1 for t in tables)
    )


def _sample(t: Tensor, i: int, rank: int) -> Tensor:
    """Sample ``i`` of a table broadcast against an x of ``rank`` dims."""
    return t[i : i + 1] if t.dim() == rank and t.shape[0] > 1 else t


def rope(x: Tensor, mat: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """``rope_matrix(x, mat, sin, cos)``, sample by sample off the CPU when the tables differ per sample."""
    if not _split(x, (sin, cos)):
        return rope_matrix(x, mat, sin, cos)
    r = x.dim()
    return torch.cat([rope_matrix(x[i : i + 1], mat, _sample(sin, i, r), _sample(cos, i, r)) for i in range(x.shape[0])])


def rope_qk(q: Tensor, k: Tensor, mat: Tensor, sin: Tensor, cos: Tensor) -> tuple[Tensor, Tensor]:
    """``rope_matrix_qk(q, k, mat, sin, cos)``, sample by sample off the CPU when the tables differ
    per sample."""
    if not (_split(q, (sin, cos)) and k.dim() == q.dim() and k.shape[0] == q.shape[0]):
        return rope_matrix_qk(q, k, mat, sin, cos)
    r = q.dim()
    outs = [
        rope_matrix_qk(q[i : i + 1], k[i : i + 1], mat, _sample(sin, i, r), _sample(cos, i, r))
        for i in range(q.shape[0])
    ]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
