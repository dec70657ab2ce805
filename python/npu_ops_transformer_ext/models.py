"""Drop-in replacements for the RoPE functions of Wan, HunyuanVideo, FLUX and diffusers.

Each function has the signature and semantics of the model's own function and computes with
``rope_matrix`` (one fused call, or one ``rope_matrix_qk`` call for q and k). All of these models
rotate adjacent pairs (interleave) over the whole head dim, so the rotate matrix is
``get_interleave_matrix(D)`` and only the tables carry the 3D structure.

Numerics: float32 math with one rounding at the end. Tables that arrive as float64 (Wan's complex128
freqs, diffusers' float64 builds) are rounded to float32 once; the result differs from a float64
computation by a few float32 ulps (see docs/models.md for the measured bounds).

* ``wan_rope_apply(x, grid_sizes, freqs)``: Wan2.1/2.2 ``rope_apply``.
* ``hunyuan_apply_rotary_emb(xq, xk, freqs_cis, head_first=False)``: HunyuanVideo's original.
* ``flux_apply_rope(xq, xk, freqs_cis)``: FLUX.1's original (2x2 rotation tables).
* ``apply_rotary_emb(x, freqs_cis, use_real, use_real_unbind_dim, sequence_dim)``: diffusers'.
* ``apply_rotary_emb_qwen(x, freqs_cis, use_real, use_real_unbind_dim)``: diffusers' Qwen-Image.
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import Tensor

from ._bits import same_bits
from ._per_sample import rope, rope_qk
from .matrices import cached_matrix, get_half_matrix, get_interleave_matrix

__all__ = [
    "apply_rotary_emb",
    "apply_rotary_emb_qwen",
    "flux_apply_rope",
    "hunyuan_apply_rotary_emb",
    "wan_rope_apply",
    "wan_rope_tables",
]


def _mat(d: int, mode: str, device) -> Tensor:
    """The float32 rotate matrix, made once per (d, mode, device)."""
    return cached_matrix(get_interleave_matrix if mode == "interleave" else get_half_matrix, d, torch.float32, device)


def _table(t: Tensor, x: Tensor) -> Tensor:
    """A table the op accepts: float32 (or x's dtype), on x's device."""
    if t.dtype != torch.float32 and t.dtype != x.dtype:
        t = t.to(torch.float32)
    return t.to(x.device)


def _qk(xq: Tensor, xk: Tensor, mat: Tensor, sin: Tensor, cos: Tensor) -> tuple[Tensor, Tensor]:
    """q and k in one ``rope_matrix_qk`` call, or in one call each when their dtypes differ (the
    originals return each output in its own input's dtype)."""
    if xq.dtype != xk.dtype:
        return rope(xq, mat, sin, cos), rope(xk, mat, sin, cos)
    return rope_qk(xq, xk, mat, sin, cos)


def _pairs_to_elems(t: Tensor) -> Tensor:
    return t.repeat_interleave(2, dim=-1)


# ---- Wan ----------------------------------------------------------------------------------------

_WAN_CACHE: OrderedDict[tuple, tuple] = OrderedDict()
_WAN_CACHE_SIZE = 8


def _wan_grids(grid_sizes: Tensor | Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """Wan's ``grid_sizes`` (a ``[B, 3]`` tensor or a list of (f, h, w)) as a list of int tuples."""
    return [
        tuple(int(v) for v in g)
        for g in (grid_sizes.tolist() if isinstance(grid_sizes, Tensor) else grid_sizes)
    ]


def wan_rope_tables(
    grid_sizes: Tensor | Sequence[Sequence[int]],
    freqs: Tensor,
    seq_len: int,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """float32 ``(cos, sin)`` of shape ``[B or 1, seq_len, 1, D]`` for Wan's ``rope_apply``.

    ``freqs``: Wan's ``[max_len, D/2]`` complex table (``cat`` of the t, h, w ``rope_params``);
    its pair columns split as ``[c - 2*(c//3), c//3, c//3]`` with ``c = D/2``. Token
    ``(i_f, i_h, i_w)`` of a ``(f, h, w)`` grid (t-major) gets ``freqs_t[i_f], freqs_h[i_h],
    freqs_w[i_w]``: ``cos = Re``, ``sin = Im``, each repeated over its pair. Tokens past
    ``f*h*w`` get cos 1, sin 0 (``wan_rope_apply`` copies those tokens through). Cached per
    (freqs's contents, grids, seq_len, device): a hit compares ``freqs`` with a copy of the freqs
    the tables were built from, bit for bit, so a ``freqs`` changed in any way (in place,
    through ``.data``, through a NumPy view) gets new tables. A ``freqs`` that requires grad (in
    grad mode) bypasses the cache: its tables are built on every call, differentiable with
    respect to ``freqs``, as Wan's complex product is.
    """
    grids = _wan_grids(grid_sizes)
    device = torch.device(device) if device is not None else freqs.device
    grad = torch.is_grad_enabled() and isinstance(freqs, Tensor) and freqs.requires_grad
    key = (tuple(freqs.shape), freqs.dtype, str(freqs.device), tuple(grids), int(seq_len), str(device))
    hit = None if grad else _WAN_CACHE.get(key)
    if hit is not None and same_bits(hit[0], freqs.detach()):
        _WAN_CACHE.move_to_end(key)
        return hit[1]
    # Cached tables are normal tensors even when built under torch.inference_mode(): an inference
    # tensor in the cache would fail a later call that records a graph.
    with torch.inference_mode(False):
        return _wan_build(grids, freqs, seq_len, device, key, grad)


def _wan_build(grids, freqs, seq_len, device, key, grad):
    """wan_rope_tables on a cache miss: the tables, cached under ``key`` unless ``grad``."""
    # Cached tables are built from the same copy of freqs that keys them (a write to freqs from
    # another thread while they are built must not leave a key with another freqs' tables).
    snap = None if grad else freqs.detach().clone()
    fr = (freqs if grad else snap).to("cpu")
    if not fr.is_complex():
        raise TypeError(f"wan_rope_tables: freqs must be complex [max_len, D/2], got {fr.dtype}")
    if fr.dim() != 2:
        raise ValueError(f"wan_rope_tables: freqs must be [max_len, D/2], got {list(fr.shape)}")
    c = fr.shape[1]
    split = [c - 2 * (c // 3), c // 3, c // 3]
    parts = fr.split(split, dim=1)
    by_grid = {}
    for g in dict.fromkeys(grids):
        f, h, w = g
        if min(g) < 0:
            raise ValueError(f"wan_rope_tables: grid sizes (f, h, w) must be >= 0, got {g}")
        if max(g) > fr.shape[0]:
            raise ValueError(
                f"wan_rope_tables: grid {g} needs positions 0 .. {max(g) - 1} along its longest axis, but freqs "
                f"{list(fr.shape)} has {fr.shape[0]} (its max_len)"
            )
        if f * h * w > seq_len:
            raise ValueError(
                f"wan_rope_apply: grid {g} has {f * h * w} tokens > sequence length {seq_len}"
            )
        z = torch.cat(
            [
                parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1),
            ],
            dim=-1,
        ).reshape(f * h * w, c)
        cos = torch.ones(seq_len, 2 * c, dtype=torch.float32)
        sin = torch.zeros(seq_len, 2 * c, dtype=torch.float32)
        cos[: f * h * w] = _pairs_to_elems(z.real).to(torch.float32)
        sin[: f * h * w] = _pairs_to_elems(z.imag).to(torch.float32)
        by_grid[g] = (cos, sin)
    if len(by_grid) == 1:
        cos, sin = by_grid[grids[0]]
        cos, sin = cos[None, :, None], sin[None, :, None]
    else:
        cos = torch.stack([by_grid[g][0] for g in grids])[:, :, None]
        sin = torch.stack([by_grid[g][1] for g in grids])[:, :, None]
    out = (cos.to(device), sin.to(device))
    if grad:
        return out
    _WAN_CACHE[key] = (snap, out)
    while len(_WAN_CACHE) > _WAN_CACHE_SIZE:
        _WAN_CACHE.popitem(last=False)
    return out


def wan_rope_apply(
    x: Tensor,
    grid_sizes: Tensor | Sequence[Sequence[int]],
    freqs: Tensor,
    *,
    out_dtype: torch.dtype | None = torch.float32,
    sp_rank: int = 0,
    sp_size: int = 1,
) -> Tensor:
    """Wan's ``rope_apply(x, grid_sizes, freqs)`` as one ``rope_matrix`` call.

    Shapes: x ``[B, L, N, D]`` (BSND); grid_sizes ``[B, 3]`` (f, h, w) per sample; freqs Wan's
    complex ``[max_len, D/2]``. Returns ``[B, L, N, D]`` in float32 as Wan does (``out_dtype=None``
    keeps x's dtype and skips the upcast: half the bytes, one bf16 rounding). Tokens past
    ``f*h*w`` pass through unchanged. Sequence parallel (Wan's ``xdit_context_parallel``): x is
    this rank's contiguous shard ``[B, L, N, D]`` of a sequence of ``L * sp_size`` tokens, i.e.
    tokens ``[sp_rank * L, (sp_rank + 1) * L)``; tokens past ``f*h*w`` (the padding) pass through.
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        got = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"wan_rope_apply: x must be [B, L, N, D] (BSND), got {got}")
    if not (isinstance(sp_size, numbers.Integral) and isinstance(sp_rank, numbers.Integral) and 0 <= sp_rank < sp_size):
        raise ValueError(f"wan_rope_apply: need integers 0 <= sp_rank < sp_size, got sp_rank {sp_rank!r}, sp_size {sp_size!r}")
    b, L, _n, d = x.shape
    grids = _wan_grids(grid_sizes)  # once: a grid_sizes tensor on a device costs a sync to read
    if len(grids) not in (1, b):
        raise ValueError(
            f"wan_rope_apply: grid_sizes must give one (f, h, w) per sample of x {list(x.shape)} "
            f"(or one for all), got {len(grids)} grids for a batch of {b}"
        )
    if not isinstance(freqs, Tensor) or freqs.dim() != 2 or 2 * freqs.shape[1] != d:
        got = list(freqs.shape) if isinstance(freqs, Tensor) else type(freqs).__name__
        raise ValueError(f"wan_rope_apply: freqs must be [max_len, D/2] = [max_len, {d // 2}] for x's D = {d}, got {got}")
    cos, sin = wan_rope_tables(grids, freqs, L * sp_size, device=x.device)
    if sp_size > 1:
        cos, sin = cos[:, sp_rank * L : (sp_rank + 1) * L], sin[:, sp_rank * L : (sp_rank + 1) * L]
    xin = x if out_dtype is None else x.to(out_dtype)
    mat = _mat(d, "interleave", x.device)
    # Samples with different grids: tables vary along B and S, one call on the CPU, sample by
    # sample off it (the NPU kernel takes tables that vary along one dim of x).
    out = rope(xin, mat, sin, cos)
    # Padding tokens: Wan concatenates them unchanged. The tables give them x*1 + partner*0, which
    # is x except for -0 (comes out +0) and an Inf or NaN partner (NaN), so copy them instead.
    for i in range(b):
        f, h, w = grids[i if len(grids) > 1 else 0]
        start = max(0, min(L, f * h * w - sp_rank * L))
        if start < L:
            out[i, start:] = xin[i, start:]
    return out


# ---- HunyuanVideo ------------------------------------------------------------------------------


def _real_tables(freqs_cis):
    """(cos, sin) with last dim D from a (cos, sin) tuple or a complex [..., D/2] table."""
    if isinstance(freqs_cis, (tuple, list)) and len(freqs_cis) == 2 and all(isinstance(t, Tensor) for t in freqs_cis):
        cos, sin = freqs_cis
        return cos, sin
    if not isinstance(freqs_cis, Tensor) or not freqs_cis.is_complex():
        raise TypeError(
            "hunyuan_apply_rotary_emb: freqs_cis must be a (cos, sin) pair of [S, D] tensors or a complex "
            f"[S, D/2] tensor, got {type(freqs_cis).__name__}"
        )
    return _pairs_to_elems(freqs_cis.real), _pairs_to_elems(freqs_cis.imag)


def hunyuan_apply_rotary_emb(
    xq: Tensor,
    xk: Tensor | None,
    freqs_cis: Tensor | tuple[Tensor, Tensor],
    head_first: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """HunyuanVideo's ``apply_rotary_emb(xq, xk, freqs_cis, head_first=False) -> (xq_out, xk_out)``.

    xq/xk ``[B, S, H, D]`` (``[B, H, S, D]`` with ``head_first``); freqs_cis ``(cos, sin)`` each
    ``[S, D]`` (the real path HunyuanVideo uses) or a complex ``[S, D/2]``. Interleaved pairs,
    float32 math, each output in its input's dtype. q and k go through one ``rope_matrix_qk`` call
    (one call each when their dtypes differ).
    """
    cos, sin = _real_tables(freqs_cis)
    s = xq.shape[-2] if head_first else xq.shape[1]
    if cos.shape[-2:] != (s, xq.shape[-1]):
        raise ValueError(
            f"hunyuan_apply_rotary_emb: freqs must be [S, D] = [{s}, {xq.shape[-1]}], got {list(cos.shape)}"
        )
    if not head_first:
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    cos, sin = _table(cos, xq), _table(sin, xq)
    mat = _mat(xq.shape[-1], "interleave", xq.device)
    if xk is None:
        return rope(xq, mat, sin, cos), None
    return _qk(xq, xk, mat, sin, cos)


# ---- FLUX ---------------------------------------------------------------------------------------


def flux_apply_rope(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    """FLUX.1's ``apply_rope(xq, xk, freqs_cis) -> (xq_out, xk_out)``.

    xq/xk ``[B, H, L, D]``; freqs_cis ``[B, 1, L, D/2, 2, 2]``, per pair the rotation
    ``[[cos, -sin], [sin, cos]]`` (as FLUX's ``rope`` builds it). Each output in its input's
    dtype; q and k go through one ``rope_matrix_qk`` call (one call each when their dtypes differ).
    """
    d = xq.shape[-1]
    if not isinstance(freqs_cis, Tensor) or freqs_cis.dim() < 3 or tuple(freqs_cis.shape[-3:]) != (d // 2, 2, 2):
        got = list(freqs_cis.shape) if isinstance(freqs_cis, Tensor) else type(freqs_cis).__name__
        raise ValueError(
            f"flux_apply_rope: freqs_cis must be [B, 1, L, D/2, 2, 2] with D/2 = {d // 2} (xq's D = {d}), got {got}"
        )
    cos = _pairs_to_elems(freqs_cis[..., 0, 0])
    sin = _pairs_to_elems(freqs_cis[..., 1, 0])
    cos, sin = _table(cos, xq), _table(sin, xq)
    return _qk(xq, xk, _mat(xq.shape[-1], "interleave", xq.device), sin, cos)


# ---- diffusers ----------------------------------------------------------------------------------


def apply_rotary_emb(
    x: Tensor,
    freqs_cis: Tensor | tuple[Tensor, Tensor],
    use_real: bool = True,
    use_real_unbind_dim: int = -1,
    sequence_dim: int = 2,
) -> Tensor:
    """diffusers' ``apply_rotary_emb`` (``diffusers.models.embeddings``), same arguments.

    ``use_real=True``: freqs_cis ``(cos, sin)`` each ``[S, D]``; x ``[B, H, S, D]``
    (``sequence_dim=2``) or ``[B, S, H, D]`` (``sequence_dim=1``); ``use_real_unbind_dim=-1`` pairs
    adjacent elements (FLUX, HunyuanVideo), ``-2`` pairs the halves. ``use_real=False``: freqs_cis
    complex ``[..., S, D/2]`` unsqueezed at dim 2 (x ``[B, S, H, D]``). Output in x's dtype.
    """
    if use_real:
        cos, sin = freqs_cis
        if sequence_dim == 2:
            cos, sin = cos[None, None], sin[None, None]
        elif sequence_dim == 1:
            cos, sin = cos[None, :, None], sin[None, :, None]
        else:
            raise ValueError(f"`sequence_dim={sequence_dim}` but should be 1 or 2.")
        if use_real_unbind_dim == -1:
            mode = "interleave"
        elif use_real_unbind_dim == -2:
            mode = "half"
        else:
            raise ValueError(f"`use_real_unbind_dim={use_real_unbind_dim}` but should be -1 or -2.")
    else:
        cos, sin = _real_tables(freqs_cis)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        mode = "interleave"
    return rope(x, _mat(x.shape[-1], mode, x.device), _table(sin, x), _table(cos, x))


def apply_rotary_emb_qwen(
    x: Tensor,
    freqs_cis: Tensor | tuple[Tensor, Tensor],
    use_real: bool = True,
    use_real_unbind_dim: int = -1,
) -> Tensor:
    """diffusers' Qwen-Image ``apply_rotary_emb_qwen``: x ``[B, S, H, D]``; real path tables
    ``[S, D]`` broadcast as ``[1, 1, S, D]`` (as diffusers does), complex path ``[S, D/2]``
    broadcast as ``[S, 1, D/2]`` (what Qwen-Image uses)."""
    if use_real:
        return apply_rotary_emb(x, freqs_cis, True, use_real_unbind_dim, sequence_dim=2)
    cos, sin = _real_tables(freqs_cis)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return rope(x, _mat(x.shape[-1], "interleave", x.device), _table(sin, x), _table(cos, x))
