"""Bitwise tensor equality, for the checks that decide whether a cached or shortcut result is exact.

``torch.equal`` compares values: it calls ``+0`` and ``-0`` equal and a NaN unequal to itself, so a
check built on it can take a shortcut that changes the sign of a zero. ``same_bits`` compares the
stored bits instead (the same NaN compares equal, ``+0`` and ``-0`` do not).
"""

from __future__ import annotations

import torch
from torch import Tensor

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(t: Tensor) -> Tensor:
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.view(_INT_OF_SIZE[t.element_size()])
    return t


def same_bits(a: Tensor, b: Tensor) -> bool:
    """True when ``a`` and ``b`` have the same dtype and shape and every element the same bits."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(_as_bits(a), _as_bits(b)))
