"""Sequence parallel: each rank's slice of the RoPE tables when the sequence S is sharded.

RoPE is position-wise, so with x sharded along S a rank needs exactly the table rows of the
positions it holds; ``rope_matrix`` on the local shard with the local tables gives the rows of the
full result, bit for bit (the op does the same fp32 arithmetic per element). Two splits:

* ``"contiguous"``: rank r holds positions ``[r*L, (r+1)*L)`` with ``L = S / world_size``
  (Ulysses / Wan's ``xdit_context_parallel``).
* ``"zigzag"``: S is cut into ``2 * world_size`` chunks of ``C = S / (2 * world_size)`` and rank r
  holds chunks ``r`` and ``2 * world_size - 1 - r``, in that order: the load-balanced split of
  causal context-parallel (ring) attention, where early chunks are cheap and late ones costly.

    idx = shard_indices(S, world, rank, "zigzag")      # global positions of the local rows
    x_local = shard(x, world, rank, dim=2, mode="zigzag")
    cos_l, sin_l = shard_tables(cos, sin, world, rank, seq_dim=-2, mode="zigzag")
    out_local = rope_matrix(x_local, mat, sin_l, cos_l)
    out = unshard(all_gathered_parts, dim=2, mode="zigzag")    # back to position order

``pad_tables`` extends tables with the identity (cos 1, sin 0) when S was padded to a multiple of
the world size, as Wan pads its freqs with ones.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["MODES", "pad_tables", "shard", "shard_indices", "shard_tables", "unshard"]

MODES = ("contiguous", "zigzag")


def _int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__} {v!r}")
    return int(v)


def _seq_dim(fn: str, t, dim) -> int:
    """``dim`` checked against ``t`` (a tensor) and made non-negative."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: expected a torch.Tensor, got {type(t).__name__}; pass torch.as_tensor(...)")
    dim = _int("dim", dim)
    if not -t.dim() <= dim < t.dim():
        raise ValueError(
            f"{fn}: dim {dim} is out of range for a tensor of shape {list(t.shape)} (rank {t.dim()}); "
            "the table's sequence dim is -2 for [S, D] / [1, 1, S, D] (BNSD), -3 for [S, 1, D] / [1, S, 1, D] (BSND)"
        )
    return dim % t.dim()


def _split(world_size: int, rank: int, mode: str) -> tuple[int, int]:
    """``(world_size, rank)`` checked, with ``mode``."""
    world_size, rank = _int("world_size", world_size), _int("rank", rank)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
    return world_size, rank


def _chunks(seq_len: int, world_size: int, rank: int, mode: str) -> list[tuple[int, int]]:
    """(start, length) pieces of the global sequence held by ``rank``, in local order."""
    seq_len = _int("seq_len", seq_len)
    world_size, rank = _split(world_size, rank, mode)
    parts = world_size if mode == "contiguous" else 2 * world_size
    if seq_len % parts:
        raise ValueError(
            f"{mode} split: sequence length {seq_len} must be a multiple of {parts} "
            f"({'world_size' if mode == 'contiguous' else '2 * world_size'}); pad it (pad_tables) first"
        )
    c = seq_len // parts
    if mode == "contiguous":
        return [(rank * c, c)]
    return [(rank * c, c), ((2 * world_size - 1 - rank) * c, c)]


def shard_indices(seq_len: int, world_size: int, rank: int, mode: str = "contiguous") -> Tensor:
    """int64 global positions of the rows ``rank`` holds, in local order."""
    return torch.cat([torch.arange(s, s + n) for s, n in _chunks(seq_len, world_size, rank, mode)])


def shard(t: Tensor, world_size: int, rank: int, dim: int, mode: str = "contiguous") -> Tensor:
    """``rank``'s rows of ``t`` along ``dim`` (a view for contiguous, a copy for zigzag). A size-1
    ``dim`` (a table broadcast along the sequence) is returned unchanged: a sequence of one
    token cannot be split, so shard only tables that way."""
    dim = _seq_dim("shard", t, dim)
    _split(world_size, rank, mode)
    if t.shape[dim] == 1:
        return t
    pieces = [t.narrow(dim, s, n) for s, n in _chunks(t.shape[dim], world_size, rank, mode)]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=dim)


def shard_tables(
    cos: Tensor,
    sin: Tensor,
    world_size: int,
    rank: int,
    seq_dim: int = -2,
    mode: str = "contiguous",
) -> tuple[Tensor, Tensor]:
    """``(cos_local, sin_local)``: the rows of the tables for ``rank``'s positions. ``seq_dim`` is
    the table's sequence dim: -2 for ``[S, D]`` / ``[1, 1, S, D]`` (BNSD), -3 for ``[S, 1, D]`` /
    ``[1, S, 1, D]`` (BSND). A table broadcast along the sequence (size 1 at ``seq_dim``, or a
    ``[D]`` table with no such dim) is returned unchanged."""
    lengths = [
        t.shape[_table_seq_dim("shard_tables", n, t, seq_dim)]
        for n, t in (("cos", cos), ("sin", sin))
        if isinstance(t, Tensor) and _has_seq_dim(t, seq_dim)
    ]
    if len(lengths) == 2 and 1 not in lengths and lengths[0] != lengths[1]:
        raise ValueError(
            f"shard_tables: cos {list(cos.shape)} and sin {list(sin.shape)} must have the same length along "
            f"seq_dim {seq_dim} (or 1 for a table broadcast along the sequence), got {lengths[0]} and {lengths[1]}"
        )
    return (_shard_table("cos", cos, world_size, rank, seq_dim, mode),
            _shard_table("sin", sin, world_size, rank, seq_dim, mode))


def _has_seq_dim(t, seq_dim) -> bool:
    """False for a ``[D]`` table (broadcast along S, with no sequence dim). A table of more dims
    must have ``seq_dim``: an ``[S, D]`` table given seq_dim -3 is a BNSD table passed as BSND."""
    return not (isinstance(t, Tensor) and t.dim() == 1 and isinstance(seq_dim, numbers.Integral)
                and not isinstance(seq_dim, bool) and -4 <= seq_dim <= -2)


def _table_seq_dim(fn: str, name: str, t, seq_dim) -> int:
    """A table's ``seq_dim`` checked and made non-negative: in range, and not the last dim (D)."""
    dim = _seq_dim(f"{fn} ({name})", t, seq_dim)
    if dim == t.dim() - 1:
        raise ValueError(f"{fn}: seq_dim {seq_dim} names {name}'s last dim, its head dim D; the sequence dim is "
                         "-2 for [S, D] / [1, 1, S, D] (BNSD), -3 for [S, 1, D] / [1, S, 1, D] (BSND)")
    return dim


def _shard_table(name, t, world_size, rank, seq_dim, mode):
    if _has_seq_dim(t, seq_dim):
        _table_seq_dim("shard_tables", name, t, seq_dim)
        return shard(t, world_size, rank, seq_dim, mode)
    _split(world_size, rank, mode)
    return t


def unshard(parts: Sequence[Tensor], dim: int, mode: str = "contiguous") -> Tensor:
    """Inverse of ``shard``: the ranks' shards (in rank order, e.g. from ``all_gather``) back in
    position order along ``dim``. The parts must be the same size along ``dim`` (an even size for
    zigzag), as ``shard`` makes them."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    parts = list(parts)
    if not parts or not all(isinstance(p, Tensor) for p in parts):
        raise TypeError(f"unshard: parts must be a non-empty sequence of tensors, one per rank, got {parts!r:.80}")
    dim = _seq_dim("unshard", parts[0], dim)
    sizes = [p.shape[dim] if p.dim() == parts[0].dim() else None for p in parts]
    if len(set(sizes)) != 1 or sizes[0] is None or (mode == "zigzag" and sizes[0] % 2):
        raise ValueError(
            f"unshard: the parts' sizes along dim {dim} are {sizes}; shard gives every rank the same "
            f"number of rows{' (an even number: two chunks)' if mode == 'zigzag' else ''}"
        )
    if mode == "contiguous":
        return torch.cat(parts, dim=dim)
    firsts, seconds = [], []
    for p in parts:
        a, b = p.chunk(2, dim=dim)
        firsts.append(a)
        seconds.append(b)
    return torch.cat(firsts + seconds[::-1], dim=dim)


def pad_tables(cos: Tensor, sin: Tensor, seq_len: int, seq_dim: int = -2) -> tuple[Tensor, Tensor]:
    """Extend tables along ``seq_dim`` to ``seq_len`` rows with the identity (cos 1, sin 0), as Wan
    pads its freqs with ones: a padding token comes out as ``x*1 + partner*0``, which is x for
    finite values but turns a -0 into +0 where the partner is positive and gives NaN where the
    partner is Inf or NaN (the matrix is shared by every token; with a dense matrix, also where
    ``x @ mat`` overflows). Copy the padding tokens back if their values must be kept bit for
    bit. A table broadcast along the sequence (size 1 at ``seq_dim``, or a ``[D]`` table with no
    such dim) is returned unchanged, so its padding tokens are rotated by its one angle like the
    others; a real one-token sequence's table cannot be told from one, so pad it yourself
    (``torch.cat`` with a row of ones / zeros) if its padding must come out as x. ``seq_len`` must
    be at least the tables' length."""
    seq_len = _int("seq_len", seq_len)
    out, lengths, dims = [], {}, {}
    for name, t in (("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor):
            raise TypeError(f"pad_tables: {name} must be a torch.Tensor, got {type(t).__name__}")
        if _has_seq_dim(t, seq_dim):
            dims[name] = _table_seq_dim("pad_tables", name, t, seq_dim)
            if t.shape[dims[name]] != 1:
                lengths[name] = t.shape[dims[name]]
    if len(set(lengths.values())) > 1:
        raise ValueError(f"pad_tables: cos and sin have {lengths['cos']} and {lengths['sin']} rows along "
                         f"seq_dim {seq_dim}; they must be tables of the same positions")
    n = next(iter(lengths.values()), None)
    if n is not None and seq_len < n:
        raise ValueError(f"pad_tables: seq_len {seq_len} is less than the tables' {n} rows along seq_dim {seq_dim}")
    for name, t, fill in (("cos", cos, 1), ("sin", sin, 0)):
        if name not in lengths or seq_len == n:
            out.append(t)
            continue
        shape = list(t.shape)
        shape[dims[name]] = seq_len - n
        out.append(torch.cat([t, torch.full(shape, fill, dtype=t.dtype, device=t.device)], dim=dims[name]))
    return out[0], out[1]
