"""cos/sin tables and the matching rotate matrix for ``rope_matrix``, as real models build them.

Every builder returns ``RopeTables(cos, sin, mat)`` with ``cos``/``sin`` of shape ``[..., S, D]``
(float32 by default, or the dtype you ask for) and ``mat`` the ``[D, D]`` rotate matrix, so that

    rope_matrix(x, mat, sin, cos) == RoPE(x)

for x with head dim ``D`` once the tables are viewed to broadcast with x's layout (see
``for_layout``). Notation: ``pos`` a position, ``j`` a frequency (pair) index,
``inv_freq[j] = theta ** (-2j / d)`` for a rotated dim ``d``, angle ``phi_j(pos) = pos * inv_freq[j]``.

Layout of the pairs (``mode``):
  * ``"half"`` (GPT-NeoX, LLaMA): pairs ``(j, j + d/2)``; ``cos = [cos(phi), cos(phi)]``; mat is
    ``get_half_matrix(d)``.
  * ``"interleave"`` (GPT-J, Wan, HunyuanVideo, FLUX, Qwen-Image): pairs ``(2j, 2j+1)``;
    ``cos = [cos(phi_0), cos(phi_0), cos(phi_1), ...]``; mat is ``get_interleave_matrix(d)``.

Precision: angles and cos/sin are computed on the CPU in ``freqs_dtype`` (float64 by default, as
Wan and diffusers' FLUX do; float32 reproduces models that build float32 tables, e.g.
HunyuanVideo) and rounded once to ``dtype`` (float32 by default: the op computes in float32 and
accepts float32 tables with bf16/fp16 x, so there is no reason to round tables to bf16).

Partial rotary dim: dims past the rotated ones get ``cos = 1``, ``sin = -0.0`` and all-zero rows
and columns in ``mat``, so ``out`` is ``x`` there bit for bit: ``x*1 + (+0)*(-0.0)`` is ``x + -0``,
which keeps a ``-0`` (``sin = +0`` would add ``+0`` and turn it into ``+0``). The CPU kernel keeps
its permutation fast path for such a partial signed permutation.
"""

from __future__ import annotations

import copy
import math
import numbers
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ._per_sample import rope, rope_qk
from .matrices import compose_matrix, get_half_matrix, get_interleave_matrix
from .ops import _PACKED

__all__ = [
    "FLUX_SPLIT",
    "HUNYUAN_VIDEO_SPLIT",
    "QWEN_IMAGE_SPLIT",
    "SEED_3D_SPLIT",
    "WAN_SPLIT",
    "RopeTables",
    "RotaryEmbedding",
    "for_layout",
    "grid_positions",
    "hf_rope_scaling",
    "hf_rotary_dim",
    "rope_1d",
    "rope_inv_freq",
    "rope_mrope",
    "rope_nd",
    "rotate_matrix",
    "wan_split",
]

#: The original operator's 3D split (``44 + 44 + 40``), per axis rotated in ``mode``.
SEED_3D_SPLIT = (44, 44, 40)
#: Wan2.1/2.2 at head dim 128: ``[d - 4*(d//6), 2*(d//6), 2*(d//6)]`` (t, h, w), theta 10000.
WAN_SPLIT = (44, 42, 42)
#: HunyuanVideo ``rope_dim_list`` (t, h, w), theta 256.
HUNYUAN_VIDEO_SPLIT = (16, 56, 56)
#: FLUX.1 ``axes_dim`` (index, row, col), theta 10000.
FLUX_SPLIT = (16, 56, 56)
#: Qwen-Image ``axes_dims_rope`` (frame, h, w), theta 10000, centered h/w positions.
QWEN_IMAGE_SPLIT = (16, 56, 56)

_MODES = ("half", "interleave")


class RopeTables(NamedTuple):
    """``cos``, ``sin``: ``[..., S, D]``; ``mat``: ``[D, D]``. Call ``rope_matrix(x, mat, sin, cos)``."""

    cos: Tensor
    sin: Tensor
    mat: Tensor


def wan_split(head_dim: int) -> tuple:
    """Wan's per-axis rotated dims for a head dim d: ``(d - 4*(d//6), 2*(d//6), 2*(d//6))``."""
    h = 2 * (head_dim // 6)
    return (head_dim - 2 * h, h, h)


# ---- frequencies and scaling -------------------------------------------------------------------


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _check_freqs_dtype(dtype, what: str) -> None:
    """The frequencies and angles are computed in float64 or float32; a 16-bit dtype would round
    the angles themselves (wrong by up to 2 at S = 4096)."""
    if dtype not in (torch.float64, torch.float32):
        raise TypeError(f"{what} must be torch.float64 or torch.float32 (the dtype the angles are computed in), got {dtype}")


def _check_table_dtype(dtype, what: str) -> None:
    """A dtype the tables can be rounded to: floating, and not a packed one."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype in _PACKED:
        packed = " (not a packed one: two values per element)" if dtype in _PACKED else ""
        raise TypeError(f"{what} must be a floating dtype{packed}, got {dtype}")


def _get(scaling: Mapping, *names, default=None):
    for n in names:
        if n in scaling and scaling[n] is not None:
            return scaling[n]
    return default


def _plain(v):
    """A tensor or NumPy value as plain Python (``tolist()``: a 0-dim one as its number, else nested
    lists); anything else as it is."""
    return v.tolist() if isinstance(v, Tensor) or (type(v).__module__ == "numpy" and hasattr(v, "tolist")) else v


def _one_number(v):
    """A one-element real tensor as its number (a base may be given so); anything else as it is."""
    return v.item() if isinstance(v, Tensor) and v.numel() == 1 and not v.is_complex() else v


def _number(scaling: Mapping, name: str, default=None, positive: bool = False) -> float:
    """A number of the scaling mapping (a 0-dim tensor or array counts), checked: a real number,
    finite, and > 0 when ``positive``; the error names the key."""
    v = _get(scaling, name, default=default)
    if getattr(v, "ndim", None) == 0:  # a 0-dim tensor or array, a NumPy scalar
        v = _plain(v)
    if not _is_number(v):
        raise TypeError(f"rope_inv_freq: the scaling's {name} must be a real number, got {type(v).__name__} {v!r}")
    v = float(v)
    if not math.isfinite(v) or (positive and v <= 0):
        raise ValueError(f"rope_inv_freq: the scaling's {name} must be a finite number{' > 0' if positive else ''}, got {v}")
    return v


def _longrope_factors(scaling: Mapping, key: str, dim: int, dtype: torch.dtype) -> Tensor:
    """LongRoPE's ``short_factor`` or ``long_factor``: dim // 2 finite numbers > 0."""
    v = _plain(_get(scaling, key, default=()))
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable) or not all(_is_number(e) for e in v):
        raise TypeError(f"rope_inv_freq: longrope {key} must be a list of dim // 2 = {dim // 2} numbers, got {v!r:.80}")
    ext = torch.tensor([float(e) for e in v], dtype=dtype)
    if ext.numel() != dim // 2:
        raise ValueError(f"rope_inv_freq: longrope {key} must have dim // 2 = {dim // 2} entries, got {ext.numel()}")
    if not bool((torch.isfinite(ext) & (ext > 0)).all()):
        raise ValueError(f"rope_inv_freq: longrope {key} must be finite numbers > 0, got {ext.tolist()}")
    return ext


_KINDS = ("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")


def _kind(scaling: Mapping | None) -> str:
    if scaling is not None and not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be None or a mapping such as {{'rope_type': 'linear', 'factor': 2.0}} (HF's "
            f"rope_scaling), got {type(scaling).__name__} {scaling!r}"
        )
    return "default" if scaling is None else _get(scaling, "rope_type", "type", default="default")


def rope_inv_freq(
    dim: int,
    theta: float = 10000.0,
    scaling: Mapping | None = None,
    *,
    seq_len: int | None = None,
    max_position_embeddings: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, float]:
    """Inverse frequencies ``[dim // 2]`` on the CPU and the attention factor: ``(inv_freq, attn)``.

    ``inv_freq[j] = 1 / theta ** (2j / dim)``; ``attn`` multiplies cos and sin (1 except for YaRN
    and LongRoPE). ``scaling`` is None or a mapping as HF writes ``rope_parameters`` /
    ``rope_scaling``: ``"rope_type"`` (or ``"type"``), ``"factor"``, and ``"rope_theta"``, which
    when present is the base and wins over ``theta``. ``L`` below is
    ``original_max_position_embeddings`` from the mapping, else ``max_position_embeddings``.
    ``hf_rope_scaling(config)`` fills in what HF takes from the config. Every type but
    ``default`` needs a finite ``factor`` > 0 (YaRN and LongRoPE derive it from L and
    ``max_position_embeddings`` when both are known); ``dtype`` is float64 or float32.

    * ``default``: no scaling.
    * ``linear`` (position interpolation): ``inv_freq / factor``.
    * ``ntk`` (NTK-aware, static): ``theta' = theta * factor ** (dim / (dim - 2))``.
    * ``dynamic`` (dynamic NTK): for ``seq_len > L``,
      ``theta' = theta * (factor * seq_len / L - (factor - 1)) ** (dim / (dim - 2))``; unchanged
      for ``seq_len <= L``. (HF's L is ``config.max_position_embeddings``.)
    * ``yarn``: ``beta_fast`` (32), ``beta_slow`` (1), ``truncate`` (True), ``factor`` (default
      ``max_position_embeddings / L``). With ``c(r) = dim * ln(L / (2 pi r)) / (2 ln theta)``,
      ``lo = max(floor(c(beta_fast)), 0)``, ``hi = min(ceil(c(beta_slow)), dim - 1)`` (no
      floor/ceil when ``truncate`` is False or None, as HF reads it) and ``ramp[j] = clamp((j - lo) / (hi - lo), 0, 1)``
      (``hi += 0.001`` when equal): ``inv_freq = base/factor * ramp + base * (1 - ramp)``.
      ``attn = attention_factor`` if given, else with ``m(s, k) = 0.1 * k * ln(s) + 1`` (1 for
      ``s <= 1``): ``m(factor, mscale) / m(factor, mscale_all_dim)`` when both are given, else
      ``m(factor, 1)``.
    * ``llama3``: ``low_freq_factor`` (1), ``high_freq_factor`` (4), ``L`` (8192 when absent).
      With wavelength ``w = 2 pi / inv_freq``: ``w < L / high`` keeps ``inv_freq``; ``w > L / low``
      uses ``inv_freq / factor``; in between ``s = (L / w - low) / (high - low)`` and
      ``inv_freq = (1 - s) * inv_freq / factor + s * inv_freq``.
    * ``longrope`` (Phi-3): ``inv_freq / ext`` with ``ext = long_factor`` (a list of ``dim // 2``)
      when ``seq_len > L``, else ``short_factor``. ``attn = attention_factor`` if given, else
      ``sqrt(1 + ln(factor) / ln(L))`` (1 for ``factor <= 1``), ``factor`` defaulting to
      ``max_position_embeddings / L``.
    """
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):  # int, NumPy or 0-dim integer tensor
        raise TypeError(f"rope_inv_freq: dim must be an int, got {type(dim).__name__} {dim!r}")
    dim = operator.index(dim)
    if dim <= 0 or dim % 2:
        raise ValueError(f"rope_inv_freq: dim must be a positive even number, got {dim}")
    theta = _one_number(theta)
    if not _is_number(theta):
        raise TypeError(f"rope_inv_freq: theta (the base) must be a real number, got {type(theta).__name__} {theta!r}")
    _check_freqs_dtype(dtype, "rope_inv_freq: dtype")
    kind = _kind(scaling)  # refuses a scaling that is not a mapping
    idx = torch.arange(0, dim, 2, dtype=dtype)
    attn = 1.0
    if kind not in _KINDS:
        raise ValueError(
            f"rope_inv_freq: unknown scaling type {kind!r}; expected one of {', '.join(_KINDS)}"
        )
    if scaling is not None and _get(scaling, "rope_theta") is not None:
        theta = _number(scaling, "rope_theta")
    if not (math.isfinite(theta) and theta > 0):
        raise ValueError(f"rope_inv_freq: theta (the base) must be a finite number > 0, got {theta}")
    orig = None if scaling is None else _get(scaling, "original_max_position_embeddings")
    orig = max_position_embeddings if orig is None else orig
    if orig is not None and not (_is_number(orig) and math.isfinite(orig) and orig > 0):
        raise ValueError(
            f"rope_inv_freq: original_max_position_embeddings (or max_position_embeddings=) must be a "
            f"number > 0, got {orig!r}"
        )
    factor = None if scaling is None else _get(scaling, "factor")
    if factor is None and kind in ("yarn", "longrope") and orig and max_position_embeddings:
        factor = max_position_embeddings / orig
    if factor is None and kind != "default":
        how = (
            ", or original_max_position_embeddings in it and max_position_embeddings= (factor = "
            "max_position_embeddings / original_max_position_embeddings, as HF derives it; "
            "hf_rope_scaling(config) fills it in)"
            if kind in ("yarn", "longrope")
            else ""
        )
        raise ValueError(f"rope_inv_freq: {kind} scaling needs 'factor' in the mapping{how}, got {dict(scaling)}")
    if factor is not None and not (_is_number(factor) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"rope_inv_freq: the scaling's factor must be a finite number > 0, got {factor!r}")
    factor = 1.0 if factor is None else float(factor)
    if kind in ("ntk", "dynamic") and dim == 2:
        raise ValueError(f"rope_inv_freq: {kind} scaling needs dim > 2 (its exponent is dim / (dim - 2))")

    def need_orig():
        if orig is None:
            raise ValueError(
                f"rope_inv_freq: {kind} scaling needs original_max_position_embeddings in the "
                f"mapping or max_position_embeddings= (hf_rope_scaling(config) fills it in)"
            )
        return float(orig)

    base = theta
    if kind == "ntk":
        base = theta * factor ** (dim / (dim - 2))
    elif kind == "dynamic":
        L = need_orig()
        if seq_len is not None and seq_len > L:
            base = theta * (factor * seq_len / L - (factor - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (idx / dim))
    if kind == "linear":
        inv = inv / factor
    elif kind == "yarn":
        L = need_orig()
        # As HF reads them: a missing, None or 0 beta takes the default.
        beta_fast = float(_get(scaling, "beta_fast", default=0.0) or 32.0)
        beta_slow = float(_get(scaling, "beta_slow", default=0.0) or 1.0)
        if not (beta_fast > 0 and beta_slow > 0 and math.isfinite(beta_fast) and math.isfinite(beta_slow)):
            raise ValueError(
                f"rope_inv_freq: yarn beta_fast and beta_slow must be finite numbers > 0, got "
                f"{beta_fast} and {beta_slow}"
            )
        truncate = bool(scaling.get("truncate", True))  # as HF reads it: None does not truncate

        def corr(r):
            return dim * math.log(L / (r * 2 * math.pi)) / (2 * math.log(theta))

        lo, hi = corr(beta_fast), corr(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if hi == lo:
            hi += 0.001
        ramp = ((torch.arange(dim // 2, dtype=dtype) - lo) / (hi - lo)).clamp(0, 1)
        inv = inv / factor * ramp + inv * (1 - ramp)
        if _get(scaling, "attention_factor") is not None:
            attn = _number(scaling, "attention_factor", positive=True)
        else:

            def m(s, k=1.0):
                return 0.1 * k * math.log(s) + 1.0 if s > 1 else 1.0

            ms, msa = (None if _get(scaling, n) is None else _number(scaling, n) for n in ("mscale", "mscale_all_dim"))
            attn = m(factor, ms) / m(factor, msa) if ms and msa else m(factor)
    elif kind == "llama3":
        L = 8192.0 if orig is None else float(orig)
        low = _number(scaling, "low_freq_factor", default=1.0, positive=True)
        high = _number(scaling, "high_freq_factor", default=4.0, positive=True)
        wavelen = 2 * math.pi / inv
        smooth = ((L / wavelen - low) / (high - low)).clamp(0, 1)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(
            wavelen < L / high, inv, torch.where(wavelen > L / low, inv / factor, mid)
        )
    elif kind == "longrope":
        L = need_orig()
        # Both lists are checked whichever this call uses, so a bad one fails at once, not at the
        # first sequence past L.
        ext = {key: _longrope_factors(scaling, key, dim, dtype) for key in ("short_factor", "long_factor")}
        inv = inv / ext["long_factor" if seq_len is not None and seq_len > L else "short_factor"]
        if _get(scaling, "attention_factor") is not None:
            attn = _number(scaling, "attention_factor", positive=True)
        else:
            attn = math.sqrt(1 + math.log(factor) / math.log(L)) if factor > 1 else 1.0
    return inv, attn


# A config.json's keys that HF's config classes read under another name, for a dict read as it is
# (GPT-NeoX and Pythia; DeepSeek-V2/V3 rotate qk_rope_head_dim of each head).
_DICT_ALIASES = {
    "partial_rotary_factor": ("rotary_pct",),
    "rope_theta": ("rotary_emb_base",),
    "head_dim": ("qk_rope_head_dim",),
}


def _cfg(config, name: str, default=None):
    """``name`` of a config object, or of a dict under that name or one of its _DICT_ALIASES."""
    if isinstance(config, Mapping):
        v = config.get(name)
        for alias in _DICT_ALIASES.get(name, ()):
            if v is None:
                v = config.get(alias)
    else:
        v = getattr(config, name, default)
    return default if v is None else v


def _hf_config(config: object) -> object:
    """A ``config.json`` dict as HF reads it: through transformers' config class for its
    ``model_type`` (which renames legacy keys, resolves aliases such as ``head_dim`` and applies
    the class's defaults), and of a composite (vision-language) config its text part, where the
    language model's RoPE is; the dict as it is when transformers is not installed, does not know
    the type, or its class refuses the dict."""
    if config is None or isinstance(config, (str, bytes, numbers.Number, Tensor)):
        raise TypeError(
            f"the config must be a transformers PretrainedConfig or its config.json as a dict, got "
            f"{type(config).__name__} {config!r:.80}"
        )
    if isinstance(config, Mapping):
        if not isinstance(config.get("model_type"), str):
            return config
        try:
            from transformers import CONFIG_MAPPING
        except ImportError:
            return config
        if config["model_type"] not in CONFIG_MAPPING:
            return config
        try:
            obj = CONFIG_MAPPING[config["model_type"]].from_dict(copy.deepcopy(dict(config)))
            return obj.get_text_config() if callable(getattr(obj, "get_text_config", None)) else obj
        except Exception:  # noqa: BLE001  (any refusal of the class, its validators' own types included)
            return config
    if callable(getattr(config, "get_text_config", None)):  # a PretrainedConfig: itself, or its text part
        try:
            return config.get_text_config()
        except Exception:  # noqa: BLE001
            return config
    return config


def _rope_params(config: object) -> Mapping:
    """The RoPE mapping of a config: a dict's ``rope_scaling`` first, as HF's config classes take
    it over ``rope_parameters`` (a 4.x mapping added to a transformers 5 config.json); an object's
    ``rope_parameters`` (transformers 5, already merged) before its 4.x ``rope_scaling``."""
    if isinstance(config, Mapping):
        return _cfg(config, "rope_scaling") or _cfg(config, "rope_parameters") or {}
    return _cfg(config, "rope_parameters") or _cfg(config, "rope_scaling") or {}


def hf_rope_scaling(config: object) -> dict:
    """The scaling mapping of a HF transformers config, complete: what ``rope_inv_freq``,
    ``rope_1d`` and ``RotaryEmbedding`` take as ``scaling`` to build HF's own frequencies.

    ``config``: a ``PretrainedConfig`` or its ``config.json`` as a dict (read through
    transformers' config class for its ``model_type`` when installed, as ``from_pretrained`` reads
    it; see docs/tables.md); transformers 5 ``rope_parameters`` or 4.x ``rope_scaling`` +
    ``rope_theta``. The result is a copy of those
    parameters with ``rope_type``, ``rope_theta`` and what HF reads from elsewhere in the config:
    ``original_max_position_embeddings`` (for dynamic HF's ``max_position_embeddings``; for yarn,
    llama3 and longrope the config's own ``original_max_position_embeddings`` first, as HF does),
    and ``factor`` for yarn and longrope when HF derives it (``max_position_embeddings / L``). The
    rotated dim is ``hf_rotary_dim(config)``.
    """
    config = _hf_config(config)
    rp = _rope_params(config)
    if any(isinstance(v, Mapping) for v in rp.values()):
        raise ValueError(
            "hf_rope_scaling: this config has per-layer-type rope parameters "
            f"({', '.join(k for k, v in rp.items() if isinstance(v, Mapping))}); take the one of "
            "the layers' attention type: rope_inv_freq(d, scaling=rope_parameters[type]) (each is "
            "a complete mapping), or pass a config view with that one as rope_parameters (a "
            "config.json dict without its model_type, which would expand it again)"
        )
    out = dict(rp)
    kind = _get(out, "rope_type", "type", default="default")
    out.pop("type", None)
    out["rope_type"] = kind
    out["rope_theta"] = float(_get(out, "rope_theta", default=_cfg(config, "rope_theta", 10000.0)))
    max_pos = _cfg(config, "max_position_embeddings")
    if kind == "dynamic":
        out["original_max_position_embeddings"] = max_pos
    elif kind in ("yarn", "llama3", "longrope"):
        orig = _cfg(config, "original_max_position_embeddings")
        if orig is None:
            orig = _get(out, "original_max_position_embeddings", default=max_pos)
        out["original_max_position_embeddings"] = orig
        if kind in ("yarn", "longrope") and _get(out, "factor") is None and max_pos and orig:
            out["factor"] = max_pos / orig
    return out


def hf_rotary_dim(config: object) -> tuple[int, int]:
    """``(head_dim, rotary_dim)`` of a HF config (a dict read as ``hf_rope_scaling`` reads it):
    ``head_dim`` (else ``hidden_size // num_attention_heads``) and ``int(head_dim *
    partial_rotary_factor)``."""
    config = _hf_config(config)
    head_dim = _cfg(config, "head_dim")
    if not head_dim:
        hidden, heads = _cfg(config, "hidden_size"), _cfg(config, "num_attention_heads")
        if not hidden or not heads:
            raise ValueError(
                "hf_rotary_dim: the config has neither head_dim nor hidden_size and num_attention_heads "
                f"(got hidden_size={hidden!r}, num_attention_heads={heads!r})"
            )
        head_dim = hidden // heads
    rp = _rope_params(config)
    prf = _get(rp, "partial_rotary_factor", default=_cfg(config, "partial_rotary_factor", 1.0))
    return int(head_dim), int(head_dim * float(prf))


# ---- matrices and pair layouts -----------------------------------------------------------------


def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(f"mode must be 'half' or 'interleave', got {mode!r}")


def _expand_pairs(a: Tensor, mode: str) -> Tensor:
    """Angle-per-pair ``[..., d/2]`` -> per-element ``[..., d]`` in ``mode``'s pair layout."""
    return a.repeat_interleave(2, dim=-1) if mode == "interleave" else torch.cat([a, a], dim=-1)


def rotate_matrix(
    rotary_dims: Sequence[int],
    head_dim: int | None = None,
    mode: str = "half",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Block-diagonal rotate matrix: ``mode`` within each block of ``rotary_dims``, zero tail up to
    ``head_dim`` (pass-through). ``rotate_matrix([128])`` is ``get_half_matrix(128)``;
    ``rotate_matrix([44, 44, 40], mode="half")`` is the seed's composed 3D matrix."""
    _check_mode(mode)
    rotary_dims = _int_list(rotary_dims, "rotary_dims", "rotate_matrix")
    build = get_half_matrix if mode == "half" else get_interleave_matrix
    blocks = [build(d, dtype=dtype) for d in rotary_dims]
    total = sum(rotary_dims)
    head_dim = total if head_dim is None else head_dim
    if not _is_grid_size(head_dim):
        raise TypeError(f"rotate_matrix: head_dim must be an int, got {type(head_dim).__name__} {head_dim!r}")
    head_dim = int(head_dim)
    if head_dim < total:
        raise ValueError(f"rotate_matrix: head_dim {head_dim} < sum of rotary dims {total}")
    if head_dim > total:
        blocks.append(torch.zeros(head_dim - total, head_dim - total, dtype=dtype))
    return compose_matrix(*blocks).to(device)


# Rows of float64 angles turned into tables at a time: the float64 intermediates of a long table
# (several times the table itself) never exist all at once.
_FINISH_ROWS = 8192


def _finish(ang_rows, lead: tuple, r: int, head_dim: int, attn: float | Tensor, dtype, device,
            mat: Tensor) -> RopeTables:
    """Per-element angles -> tables ``[*lead, head_dim]`` padded to head_dim with the identity.

    ``ang_rows(lo, hi)`` gives the angles ``[hi - lo, r]`` of rows ``lo .. hi - 1`` of the
    flattened ``lead`` dims; they are converted ``_FINISH_ROWS`` rows at a time into the output.
    ``attn``: the attention factor, one for all dims or one per rotated dim (``[r]``, rope_nd's
    axes)."""
    _check_table_dtype(dtype, "dtype of the tables")
    rows = math.prod(lead)
    scale = isinstance(attn, Tensor) or attn != 1.0
    shape = (*lead, head_dim)

    def trig(lo: int, hi: int) -> tuple[Tensor, Tensor]:  # cos and sin of rows lo .. hi - 1, scaled
        ang = ang_rows(lo, hi)
        c, s = torch.cos(ang), torch.sin(ang)
        return (c * attn, s * attn) if scale else (c, s)

    # One piece: a small table (a decode step's), or one being traced, whose length may be symbolic
    # (torch.export with a dynamic S; pieces would need a guard on it).
    traced = torch.compiler.is_compiling() or not isinstance(rows, int)
    if traced or (rows <= _FINISH_ROWS and r == head_dim):
        c, s = trig(0, rows)
        if r < head_dim:  # padded as below
            c = torch.cat((c, torch.ones(rows, head_dim - r, dtype=c.dtype)), 1)
            s = torch.cat((s, torch.full((rows, head_dim - r), -0.0, dtype=s.dtype)), 1)
        return RopeTables(c.to(dtype).reshape(shape).to(device), s.to(dtype).reshape(shape).to(device),
                          mat.to(device))
    cos = torch.empty(rows, head_dim, dtype=dtype)
    sin = torch.empty(rows, head_dim, dtype=dtype)
    for lo in range(0, rows, _FINISH_ROWS):
        hi = min(rows, lo + _FINISH_ROWS)
        cos[lo:hi, :r], sin[lo:hi, :r] = trig(lo, hi)
    cos[:, r:] = 1.0
    sin[:, r:] = -0.0  # keeps x's -0, see above
    return RopeTables(cos.reshape(shape).to(device), sin.reshape(shape).to(device), mat.to(device))


def _check_dims(head_dim, rotary_dim, where: str) -> None:
    """head_dim a positive int; rotary_dim (default head_dim) even and in (0, head_dim]."""
    if not isinstance(head_dim, numbers.Integral) or isinstance(head_dim, bool) or head_dim <= 0:
        raise ValueError(f"{where}: head_dim must be an int > 0, got {head_dim!r}")
    if rotary_dim is None:
        if head_dim % 2:
            raise ValueError(
                f"{where}: head_dim must be even when every dim rotates (rotary_dim not given), got "
                f"{head_dim}; pass an even rotary_dim < head_dim to rotate only the first dims"
            )
        return
    if not isinstance(rotary_dim, numbers.Integral) or isinstance(rotary_dim, bool) or rotary_dim <= 0 \
            or rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"{where}: rotary_dim must be an even int in (0, head_dim={head_dim}], got {rotary_dim!r}")


def _check_offset(offset, where: str) -> None:
    if not (_is_number(offset) and math.isfinite(offset)):
        raise TypeError(f"{where}: offset must be a finite int or float (the first position), got {offset!r}")


def _position_tensor(positions, fn: str) -> Tensor:
    """``torch.as_tensor(positions)``, detached; refuses bool and complex positions (a mask passed
    for positions would otherwise rotate by 0 and 1)."""
    p = torch.as_tensor(positions).detach()
    if p.dtype == torch.bool or p.is_complex():
        raise TypeError(f"{fn}: positions must hold integers or real numbers, got dtype {p.dtype}")
    return p


def _positions(positions, offset, dtype) -> Tensor:
    _check_offset(offset, "positions")
    if isinstance(positions, (bool, float)):
        raise TypeError(
            f"positions must be an int S (positions offset .. offset + S - 1) or a tensor of positions "
            f"[..., S], got {type(positions).__name__} {positions!r}"
        )
    if isinstance(positions, torch.SymInt):  # a symbolic S (traced by torch.export)
        return torch.arange(positions, dtype=dtype) + offset
    if isinstance(positions, numbers.Integral):  # int, NumPy integers
        if int(positions) < 0:
            raise ValueError(f"positions: S must be >= 0, got {int(positions)}")
        return torch.arange(int(positions), dtype=dtype) + offset
    p = _position_tensor(positions, "positions")
    if p.dim() == 0:
        raise ValueError(
            f"positions must be an int S (positions offset .. offset + S - 1) or a tensor of positions "
            f"[..., S] with at least one dim, got a 0-dim tensor ({p.item()!r}): pass int(S) for S "
            f"positions, or torch.tensor([p]) for the one position p"
        )
    p = p.to("cpu", dtype)
    return p + offset if offset else p


def _seq_len(pos: Tensor, scaling) -> int | None:
    """Largest position + 1, read only for dynamic NTK and LongRoPE (a host read; the other rules
    need none)."""
    if _kind(scaling) not in ("dynamic", "longrope") or not pos.numel():
        return None
    top = pos.max().item()  # a fractional largest position stays fractional (15.5 -> 16.5)
    return top + 1 if pos.is_floating_point() else int(top) + 1


# ---- builders -----------------------------------------------------------------------------------


def rope_1d(
    positions: int | Tensor,
    head_dim: int,
    *,
    rotary_dim: int | None = None,
    theta: float = 10000.0,
    offset: float = 0,
    mode: str = "half",
    scaling: Mapping | None = None,
    freqs_dtype: torch.dtype = torch.float64,
    dtype: torch.dtype = torch.float32,
    mat_dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> RopeTables:
    """1D RoPE (LLMs): ``cos[..., s, :]`` for position ``positions[..., s] + offset``.

    ``positions``: an int S (positions ``offset .. offset + S - 1``) or a tensor ``[..., S]`` of
    positions (per batch, packed sequences, ...). ``rotary_dim`` (default ``head_dim``): only the
    first ``rotary_dim`` dims rotate, the rest pass through. ``scaling``: see ``rope_inv_freq``
    (``seq_len`` for dynamic NTK and LongRoPE is the largest position + 1).
    """
    _check_mode(mode)
    _check_freqs_dtype(freqs_dtype, "rope_1d: freqs_dtype")
    _check_dims(head_dim, rotary_dim, "rope_1d")
    r = head_dim if rotary_dim is None else rotary_dim
    pos = _positions(positions, offset, freqs_dtype)
    inv, attn = rope_inv_freq(r, theta, scaling, seq_len=_seq_len(pos, scaling), dtype=freqs_dtype)
    flat = pos.reshape(-1, 1)
    return _finish(
        lambda lo, hi: _expand_pairs(flat[lo:hi] * inv, mode), tuple(pos.shape), r, head_dim, attn,
        dtype, device, rotate_matrix([r], head_dim, mode, mat_dtype),
    )


def grid_positions(
    grid: Sequence[int],
    *,
    center: bool | Sequence[bool] = False,
    start: Sequence[float] = (),
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """``[prod(grid), len(grid)]`` positions of a (t, h, w) / (h, w) grid, first axis slowest
    (``meshgrid(indexing="ij")`` flattened). ``start[a]`` shifts axis a; ``center`` (per axis or all)
    uses ``n//2 - n .. n//2 - 1`` (``arange(n) - (n - n//2)``, Qwen-Image's ``scale_rope``)."""
    n = len(grid)
    centers = [center] * n if isinstance(center, bool) else list(center)
    if len(centers) != n or len(start) > n:
        raise ValueError(
            f"grid_positions: center must be a bool or one per axis ({n}) and start at most one per axis, "
            f"got center {center!r}, start {tuple(start)!r}"
        )
    axes = []
    for a, size in enumerate(grid):
        if not _is_grid_size(size) or int(size) < 0:
            raise ValueError(f"grid_positions: every grid size must be an int >= 0, got {size!r} for axis {a} of {tuple(grid)!r}")
        p = torch.arange(int(size), dtype=dtype)
        if centers[a]:
            p = p - (int(size) - int(size) // 2)
        if a < len(start):
            p = p + start[a]
        axes.append(p)
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh], dim=-1)


def _int_list(values, what: str, fn: str) -> list[int]:
    """A sequence of ints (NumPy or 0-dim integer tensors count) as a list of ints; a float, bool
    or anything else in it is a TypeError naming ``what`` (4.5 would otherwise become 4)."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{fn}: {what} must be a sequence of ints, got {type(values).__name__} {values!r:.80}")
    values = list(values)
    if not all(_is_grid_size(v) for v in values):
        raise TypeError(f"{fn}: {what} must be ints, got {values!r:.80}")
    return [int(v) for v in values]


def _is_grid_size(g) -> bool:
    """An int, NumPy integer or 0-dim integer tensor: one axis size of a grid."""
    if isinstance(g, Tensor):
        return g.dim() == 0 and not g.is_floating_point() and not g.is_complex() and g.dtype != torch.bool
    return isinstance(g, numbers.Integral) and not isinstance(g, bool)


def _theta(t, a: int) -> float:
    """Axis a's theta as a float; anything but a real number is a TypeError naming the axis."""
    t = _one_number(t)
    if not _is_number(t):
        raise TypeError(f"rope_nd: theta must be a number or one number per axis, got {t!r} for axis {a}")
    return float(t)


def rope_nd(
    positions: Sequence[int] | Tensor,
    axes_dim: Sequence[int],
    *,
    head_dim: int | None = None,
    theta: float | Sequence[float] = 10000.0,
    mode: str = "interleave",
    scaling: Sequence[Mapping | None] | None = None,
    freqs_dtype: torch.dtype = torch.float64,
    dtype: torch.dtype = torch.float32,
    mat_dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> RopeTables:
    """2D/3D (any N) RoPE with an axis split, as image/video models build it.

    Axis ``a`` owns the next ``axes_dim[a]`` dims of D and rotates them as an independent 1D RoPE of
    dim ``d_a = axes_dim[a]`` at position ``pos_a``: ``inv_freq_a[j] = theta_a ** (-2j / d_a)``.
    ``mode="interleave"`` pairs adjacent elements (Wan ``WAN_SPLIT``, HunyuanVideo / FLUX / Qwen-Image
    ``(16, 56, 56)``; the matrix is the global interleave matrix); ``mode="half"`` rotates half of
    each block (the seed's ``44 + 44 + 40``; the matrix is block-diagonal).

    ``positions``: a grid ``(t, h, w)`` (``grid_positions``) or a tensor ``[..., S, N]`` of
    per-token axis positions (FLUX ids, shifted or centered grids). ``theta`` and ``scaling`` may be
    per axis. Dims past ``sum(axes_dim)`` up to ``head_dim`` pass through.
    """
    _check_mode(mode)
    axes_dim = _int_list(axes_dim, "axes_dim", "rope_nd")
    n = len(axes_dim)
    if not axes_dim or any(d <= 0 or d % 2 for d in axes_dim):
        raise ValueError(f"rope_nd: axes_dim must be one or more positive even dims, got {axes_dim}")
    _check_freqs_dtype(freqs_dtype, "rope_nd: freqs_dtype")
    if isinstance(positions, (list, tuple)) and all(_is_grid_size(g) for g in positions):
        pos = grid_positions(positions, dtype=freqs_dtype)
    else:  # per-token positions: a tensor, array or nested list [..., S, N]
        pos = _position_tensor(positions, "rope_nd").to("cpu", freqs_dtype)
        if pos.dim() < 2:
            raise ValueError(
                f"rope_nd: positions must be a grid (a list or tuple of {n} ints, e.g. (t, h, w)) or "
                f"per-token positions [..., S, {n}] with at least two dims, got a tensor of shape "
                f"{list(pos.shape)}; for a grid held in a tensor pass positions.tolist()"
            )
    if pos.shape[-1] != n:
        raise ValueError(f"rope_nd: positions must have {n} axes (last dim), got {list(pos.shape)}")
    one = _is_number(theta) or (isinstance(theta, Tensor) and theta.dim() == 0)
    thetas = [theta] * n if one or isinstance(theta, str) or not hasattr(theta, "__len__") else list(theta)
    if scaling is None:
        scalings = [None] * n
    elif isinstance(scaling, (list, tuple)):
        scalings = list(scaling)
    else:
        raise TypeError(
            f"rope_nd: scaling must be a list of one mapping or None per axis ({n}), got "
            f"{type(scaling).__name__}"
        )
    for name, vals in (("theta", thetas), ("scaling", scalings)):
        if len(vals) != n:
            raise ValueError(f"rope_nd: {name} must have one entry per axis ({n} for axes_dim {axes_dim}), got {len(vals)}")
    total = sum(axes_dim)
    head_dim = total if head_dim is None else head_dim
    if not _is_grid_size(head_dim) or int(head_dim) < total:
        raise ValueError(f"rope_nd: head_dim must be an int >= sum(axes_dim) = {total}, got {head_dim!r}")
    head_dim = int(head_dim)
    invs, attns = [], []
    for a, d in enumerate(axes_dim):
        seq_len = _seq_len(pos[..., a], scalings[a])  # dynamic NTK, LongRoPE: per axis
        inv, at = rope_inv_freq(d, _theta(thetas[a], a), scalings[a], seq_len=seq_len, dtype=freqs_dtype)
        invs.append(inv)
        attns.append(torch.full((d,), at, dtype=freqs_dtype))  # each axis its own factor
    attn = torch.cat(attns) if any(bool((t != 1.0).any()) for t in attns) else 1.0
    flat = pos.reshape(-1, n)

    def ang_rows(lo, hi):
        return torch.cat([_expand_pairs(flat[lo:hi, a : a + 1] * inv, mode) for a, inv in enumerate(invs)], dim=-1)

    return _finish(
        ang_rows, tuple(pos.shape[:-1]), total, head_dim, attn, dtype, device,
        rotate_matrix(axes_dim, head_dim, mode, mat_dtype),
    )


def rope_mrope(
    positions: Tensor,
    head_dim: int,
    sections: Sequence[int],
    *,
    theta: float = 10000.0,
    mode: str = "half",
    interleaved: bool = False,
    scaling: Mapping | None = None,
    freqs_dtype: torch.dtype = torch.float64,
    dtype: torch.dtype = torch.float32,
    mat_dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> RopeTables:
    """Multi-section RoPE (mRoPE: Qwen2-VL, ggml ``MROPE``): one RoPE over the whole rotary dim,
    whose frequency (pair) indices are split into ``sections`` (counted in pairs, e.g.
    ``[16, 24, 24]`` for D = 128), each taking its position from its own stream.

    ``positions``: ``[n_streams, ..., S]`` (t, h, w[, e]); for text tokens all streams are equal
    and the table equals ``rope_1d``'s. ``inv_freq[j] = theta ** (-2j / R)`` with
    ``R = 2 * sum(sections)`` (the global index, unlike ``rope_nd``). Pair j uses stream ``a`` with
    ``sum(sections[:a]) <= j < sum(sections[:a+1])``; with ``interleaved=True`` (Qwen3-VL,
    ggml ``IMROPE``) pair j uses stream 1 when ``j % 3 == 1 and j < 3 * sections[1]``, stream 2
    when ``j % 3 == 2 and j < 3 * sections[2]``, else stream 0. Dims past R pass through.
    """
    _check_mode(mode)
    sections = _int_list(sections, "sections", "rope_mrope")
    if not _is_grid_size(head_dim) or int(head_dim) <= 0:
        raise TypeError(f"rope_mrope: head_dim must be an int > 0, got {type(head_dim).__name__} {head_dim!r}")
    head_dim = int(head_dim)
    if not sections or any(s < 0 for s in sections) or sum(sections) == 0:
        raise ValueError(f"rope_mrope: sections must be pair counts >= 0 with a positive sum, got {sections}")
    _check_freqs_dtype(freqs_dtype, "rope_mrope: freqs_dtype")
    half_r = sum(sections)
    r = 2 * half_r
    if r > head_dim:
        raise ValueError(f"rope_mrope: 2 * sum(sections) = {r} exceeds head_dim {head_dim}")
    pos = _position_tensor(positions, "rope_mrope").to("cpu", freqs_dtype)
    if pos.dim() < 1 or pos.shape[0] != len(sections):
        raise ValueError(
            f"rope_mrope: positions must be [{len(sections)}, ..., S], got {list(pos.shape)}"
        )
    j = torch.arange(half_r)
    if interleaved:
        stream = torch.zeros(half_r, dtype=torch.long)
        for a in (1, 2):
            if a < len(sections):
                stream[(j % 3 == a) & (j < 3 * sections[a])] = a
    else:
        stream = torch.repeat_interleave(torch.arange(len(sections)), torch.tensor(sections))
    inv, attn = rope_inv_freq(r, theta, scaling, seq_len=_seq_len(pos, scaling), dtype=freqs_dtype)
    # pos: [n, ..., S] -> per pair [..., S, half_r] picking stream[j]
    per_pair = pos.movedim(0, -1)[..., stream]  # [..., S, half_r]
    flat = per_pair.reshape(-1, half_r)
    return _finish(
        lambda lo, hi: _expand_pairs(flat[lo:hi] * inv, mode), tuple(per_pair.shape[:-1]), r, head_dim,
        attn, dtype, device, rotate_matrix([r], head_dim, mode, mat_dtype),
    )


# ---- layouts and the cached module -------------------------------------------------------------

_SEQ_DIM = {"BNSD": -2, "BSND": -3, "SBND": -4, "TND": -3, "SD": -2}


def for_layout(t: Tensor, layout: str) -> Tensor:
    """View a table ``[S, D]`` or ``[B, S, D]`` so that it broadcasts to x in ``layout``:
    BNSD -> ``[S, D]`` / ``[B, 1, S, D]``; BSND -> ``[S, 1, D]`` / ``[B, S, 1, D]``; TND ->
    ``[T, 1, D]``; SBND -> ``[S, 1, 1, D]``; SD -> ``[S, D]``. Per-batch tables only for BNSD and
    BSND: x of the other layouts has no batch dim before S (TND's tokens are packed: its table
    has a row per token)."""
    if layout not in _SEQ_DIM:
        raise ValueError(f"layout must be one of {sorted(_SEQ_DIM)}, got {layout!r}")
    inner = -_SEQ_DIM[layout] - 2  # singleton dims between S and D
    if t.dim() not in (2, 3):
        raise ValueError(f"for_layout: the table must be [S, D] or [B, S, D], got {list(t.shape)}")
    if t.dim() == 3:
        if layout not in ("BNSD", "BSND"):
            raise ValueError(
                f"for_layout: a per-batch table [B, S, D] ({list(t.shape)}) cannot broadcast to {layout}, whose x "
                f"has no batch dim before S; per-batch tables go with BNSD or BSND"
                + (" (TND: build the table for the packed tokens' positions, [T, D])" if layout == "TND" else "")
            )
        return t.unsqueeze(1) if layout == "BNSD" else t.unsqueeze(2)
    return t.reshape(t.shape[0], *([1] * inner), t.shape[-1])


_ROPE_SETTINGS = ("head_dim", "rotary_dim", "theta", "mode", "layout", "scaling", "freqs_dtype", "table_dtype")


def _frozen_value(v):
    """A scaling value that the caller can no longer change: a list, tuple, NumPy array or tensor
    (LongRoPE's factors) as a tuple of its values (a 0-dim array or tensor as its number)."""
    v = _plain(v)
    return tuple(_frozen_value(e) for e in v) if isinstance(v, (list, tuple)) else v


class _FrozenMapping(Mapping):
    """A read-only copy of a scaling mapping, its lists, arrays and tensors (LongRoPE's factors) as
    tuples; unlike a ``MappingProxyType`` it pickles and deep-copies with the module."""

    def __init__(self, scaling: Mapping):
        self._d = {k: _frozen_value(v) for k, v in scaling.items()}

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return repr(self._d)


# Positions RotaryEmbedding's cache holds at most (at D = 128, 1 GiB for each float32 table); a call
# that needs a position past it builds its own rows.
_CACHE_MAX_POSITIONS = 1 << 21


class RotaryEmbedding(torch.nn.Module):
    """1D RoPE with cached tables, applied with ``rope_matrix_qk``: ``rope(q, k) -> (q_out, k_out)``.

    ``layout`` is required and never guessed: ``"BNSD"`` for q/k ``[B, N, S, D]`` (HF transformers
    after its ``transpose(1, 2)``), ``"BSND"`` for ``[B, S, N, D]`` (flash-attn, most fused LLM code);
    ``"SBND"``, ``"TND"`` and ``"SD"`` are accepted too. A q/k pair whose sequence dims disagree, or
    ``positions`` whose length is not q's sequence length, raises a ``ValueError`` naming both
    layouts, since that is what a q/k in the other layout looks like.

    Tables are kept out of the module's buffers on purpose: ``model.to(torch.bfloat16)`` must not
    round them (they are float32 unless ``table_dtype`` says otherwise). The settings are fixed
    when the module is built (assigning one raises ``AttributeError``; ``scaling`` is a read-only
    copy), and tables a caller wrote into are rebuilt. ``forward(q, k)`` rotates
    q and k; pass ``offset`` (KV cache) or per-token ``positions`` (``[S]`` or ``[B, S]``).

        rope = RotaryEmbedding(128, theta=1e6, mode="half", layout="BSND",
                               scaling={"type": "yarn", "factor": 4.0,
                                        "original_max_position_embeddings": 32768})
        q, k = rope(q, k)
    """

    def __init__(
        self,
        head_dim: int,
        *,
        layout: str,
        rotary_dim: int | None = None,
        theta: float = 10000.0,
        mode: str = "half",
        scaling: Mapping | None = None,
        freqs_dtype: torch.dtype = torch.float64,
        table_dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        _check_mode(mode)
        if layout not in _SEQ_DIM:
            raise ValueError(
                f"RotaryEmbedding: layout must be one of {sorted(_SEQ_DIM)} (BNSD for q [B, N, S, D], "
                f"BSND for q [B, S, N, D]), got {layout!r}"
            )
        _check_dims(head_dim, rotary_dim, "RotaryEmbedding")
        theta = _one_number(theta)  # a tensor base, as rope_inv_freq takes it
        if not (_is_number(theta) and math.isfinite(theta) and theta > 0):
            raise ValueError(f"RotaryEmbedding: theta (the base) must be a finite number > 0, got {theta!r}")
        _check_freqs_dtype(freqs_dtype, "RotaryEmbedding: freqs_dtype")
        _check_table_dtype(table_dtype, "RotaryEmbedding: table_dtype")
        kind = _kind(scaling)  # a bad scaling is refused here, not at the first call
        if kind not in _KINDS:
            raise ValueError(f"RotaryEmbedding: unknown scaling type {kind!r}; expected one of {', '.join(_KINDS)}")
        # The settings are fixed: the cached tables are built from them. The scaling is copied (a
        # caller's later change to its own dict must not reach this module) and read-only.
        settings = {
            "head_dim": head_dim, "rotary_dim": rotary_dim, "theta": theta, "mode": mode, "layout": layout,
            "scaling": None if scaling is None else _FrozenMapping(scaling),
            "freqs_dtype": freqs_dtype, "table_dtype": table_dtype,
        }
        for name, value in settings.items():  # plain attributes (fast to read); __setattr__ refuses writes
            object.__setattr__(self, name, value)
        if scaling is not None:  # a bad scaling (factor, lists, ...) is refused here too
            rope_inv_freq(head_dim if rotary_dim is None else rotary_dim, theta, self.scaling, dtype=freqs_dtype)
        # (device, dtype, regime) -> (tables [L, D] for positions 0 .. L-1, cos and sin viewed for
        # the layout, versions of cos, sin and mat when built); L grows geometrically (see tables())
        self._cache: dict[tuple, tuple] = {}

    def __setattr__(self, name: str, value: object) -> None:
        if name in _ROPE_SETTINGS:
            raise AttributeError(
                f"RotaryEmbedding.{name} is fixed when the module is built (its cached tables come from "
                f"it); build a new RotaryEmbedding with {name}={value!r}"
            )
        super().__setattr__(name, value)

    @classmethod
    def from_hf_config(cls, config: object, *, layout: str, **kwargs: object) -> RotaryEmbedding:
        """The RoPE of a HF transformers config (half mode): ``head_dim`` and ``rotary_dim`` from
        ``hf_rotary_dim``, theta and scaling from ``hf_rope_scaling``. ``layout`` as for the
        constructor ("BNSD" for q/k as HF's attention holds them)."""
        config = _hf_config(config)  # once: a dict's config class is built here, not in both calls
        head_dim, rotary_dim = hf_rotary_dim(config)
        scaling = hf_rope_scaling(config)
        return cls(
            head_dim,
            layout=layout,
            rotary_dim=rotary_dim,
            theta=scaling["rope_theta"],
            mode="half",
            scaling=scaling,
            **kwargs,
        )

    def extra_repr(self) -> str:
        """The settings shown by ``print(module)``."""
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, theta={self.theta}, "
            f"mode={self.mode!r}, layout={self.layout!r}, "
            f"scaling={None if self.scaling is None else dict(self.scaling)}"
        )

    def _build(self, positions, offset, device):
        return rope_1d(
            positions,
            self.head_dim,
            rotary_dim=self.rotary_dim,
            theta=self.theta,
            offset=offset,
            mode=self.mode,
            scaling=self.scaling,
            freqs_dtype=self.freqs_dtype,
            dtype=self.table_dtype,
            device=device,
        )

    def _regime(self, end: int):
        """``(name, capacity limit)`` of the positions ``0 .. end - 1``: tables built for any
        length up to the limit agree on every position, so they can be cached and sliced; None
        when they cannot (dynamic NTK past L: the frequencies depend on the sequence length)."""
        kind = _kind(self.scaling)
        if kind not in ("dynamic", "longrope"):
            return ("all", None)
        L = _get(self.scaling, "original_max_position_embeddings")
        if L is None:
            return None  # rope_inv_freq raises the error that says what is missing
        if end <= L:
            return ("short", int(L))
        return ("long", None) if kind == "longrope" else None

    def _full(self, end: int, device: torch.device):
        """``(tables [L, D], cos, sin viewed for the layout)`` cached with ``L >= end``, or None
        when they cannot be cached."""
        reg = self._regime(end)
        if reg is None:
            return None
        key = (device, self.table_dtype, reg[0])
        hit = self._cache.get(key)
        # A caller wrote into the tables it was handed (views of these): rebuild. (Eager only: a
        # compiled graph reads the tables as they were when it was traced.)
        if hit is not None and not torch.compiler.is_compiling() and (
            hit[0].cos._version, hit[0].sin._version, hit[0].mat._version
        ) != hit[3]:
            hit = None
        have = 0 if hit is None else hit[0].cos.shape[0]
        if isinstance(end, torch.SymInt) and not torch.compiler.is_dynamo_compiling():
            # A symbolic length traced outside dynamo (non-strict torch.export): the cache serves
            # only if it holds every length the range allows, without a guard on the length; else
            # the caller builds the tables in the graph, uncached (an entry made here would keep
            # the trace's fake tensors).
            covered = hit is not None and statically_known_true(end <= have)
            return hit if covered else None
        if have < end:
            # (no cap while compiling: dynamo's S may be symbolic, and a cap would guard on it)
            concrete = not isinstance(end, torch.SymInt) and not torch.compiler.is_compiling()
            if concrete and end > _CACHE_MAX_POSITIONS:
                # A position this far is built per call: a cached table would hold every position
                # before it (positions near 2^31 asked for tens of GiB).
                return None
            # Geometric growth; the first build has headroom too, so that the decode steps after a
            # prefill of S tokens do not rebuild at once.
            n = max(end + end // 4, 2 * have)
            if concrete:
                n = min(n, _CACHE_MAX_POSITIONS)
            if reg[1] is not None:
                n = min(n, reg[1])
            # Built as normal tensors even under torch.inference_mode(): an inference tensor in
            # the cache would fail a later call that records a graph ("Inference tensors cannot
            # be saved for backward").
            with torch.inference_mode(False):
                t = self._build(n, 0, device)
                hit = (t, for_layout(t.cos, self.layout), for_layout(t.sin, self.layout),
                       (t.cos._version, t.sin._version, t.mat._version))
            self._cache[key] = hit
        return hit

    def tables(
        self, seq_len: int, *, offset: float = 0, device: torch.device | str | None = None
    ) -> RopeTables:
        """``RopeTables`` for positions ``offset .. offset + seq_len - 1``, viewed for the layout
        (e.g. ``[S, 1, D]`` for BSND).

        Slices of one cached table per (device, dtype) holding positions ``0 .. L - 1``: when a
        call needs a position past L, the table is rebuilt for ``max(needed + needed // 4, 2 L)``
        positions (at most 2^21), so a decode loop (``offset`` growing by one per step) rebuilds
        O(log n) times and otherwise only slices; a call that needs a position past 2^21 builds its
        own rows. Dynamic NTK past ``original_max_position_embeddings``
        (frequencies that depend on the sequence length) and non-integer or negative offsets build
        per call. The tables are views of the cache: a write into them is seen (the version
        counter) and the cache rebuilt at the next call.
        """
        if not isinstance(device, torch.device):
            device = torch.device("cpu") if device is None else torch.device(device)
        if type(offset) is not int:  # the decode loop's int skips the (slower) general check
            _check_offset(offset, "RotaryEmbedding")
        if not isinstance(seq_len, torch.SymInt):  # (symbolic under torch.export with a dynamic S)
            if type(seq_len) is not int and (not isinstance(seq_len, numbers.Integral) or isinstance(seq_len, bool)) \
                    or seq_len < 0:
                raise ValueError(f"RotaryEmbedding.tables: seq_len must be an int >= 0, got {seq_len!r}")
            seq_len = int(seq_len)
        whole = isinstance(offset, int) or float(offset).is_integer()
        hit = self._full(int(offset) + seq_len, device) if whole and offset >= 0 else None
        if hit is None:
            t = self._build(seq_len, offset, device)
            return RopeTables(for_layout(t.cos, self.layout), for_layout(t.sin, self.layout), t.mat)
        o = int(offset)
        return RopeTables(hit[1][o : o + seq_len], hit[2][o : o + seq_len], hit[0].mat)

    def _positions_tables(self, positions: Tensor, offset, device: torch.device) -> RopeTables:
        """Tables for per-token positions: rows of the cached table when the positions are
        non-negative integers (one host read of their maximum), else built."""
        full = None
        if not positions.is_floating_point() and positions.numel() and isinstance(offset, int):
            # in int64: positions + offset in a narrow dtype (uint8, int16) would wrap around
            pos = positions.to(torch.int64) + offset if offset else positions
            lo, hi = int(pos.min().item()), int(pos.max().item())
            if lo >= 0:
                hit = self._full(hi + 1, device)
                full = None if hit is None else hit[0]
        if full is None:
            t = self._build(positions, offset, device)
            cos, sin, mat = t.cos, t.sin, t.mat
        else:
            idx = pos.to(device=full.cos.device, dtype=torch.long)
            cos, sin, mat = full.cos[idx], full.sin[idx], full.mat
        return RopeTables(for_layout(cos, self.layout), for_layout(sin, self.layout), mat)

    def forward(
        self,
        q: Tensor,
        k: Tensor | None = None,
        *,
        offset: int = 0,
        positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``rope(q)`` -> q rotated; ``rope(q, k)`` -> ``(q_out, k_out)`` (one ``rope_matrix_qk`` call).

        q and k in ``self.layout`` (k may have fewer heads); positions ``offset .. offset + S - 1``
        (``offset``: tokens already in the KV cache) or the per-token ``positions`` (``[S]`` or
        ``[B, S]``). Outputs have the inputs' dtypes.
        """
        s = self._seq_len_of(q, k, positions)
        if positions is not None:
            tab = self._positions_tables(positions, offset, q.device)
        else:
            tab = self.tables(s, offset=offset, device=q.device)
        # per-sample positions [B, S] give per-sample tables: sample by sample off the CPU
        if k is None:
            return rope(q, tab.mat, tab.sin, tab.cos)
        return rope_qk(q, k, tab.mat, tab.sin, tab.cos)

    def _seq_len_of(self, q: Tensor, k: Tensor | None, positions: Tensor | None) -> int:
        """q's sequence length in ``self.layout``; checks that k and positions agree with it."""
        for name, t, optional in (("q", q, False), ("k", k, True), ("positions", positions, True)):
            if not isinstance(t, Tensor) and not (optional and t is None):
                raise TypeError(
                    f"RotaryEmbedding: {name} must be a torch.Tensor{' or None' if optional else ''}, got "
                    f"{type(t).__name__}; pass torch.as_tensor(...)"
                )
        if positions is not None:
            _position_tensor(positions, "RotaryEmbedding")
        sd = _SEQ_DIM[self.layout]
        if q.dim() < -sd:
            raise ValueError(
                f"RotaryEmbedding(layout={self.layout!r}): q must have rank >= {-sd}, got "
                f"{list(q.shape)}"
            )
        s = q.shape[sd]

        def mismatch(what: str) -> ValueError:
            return ValueError(
                f"RotaryEmbedding(layout={self.layout!r}): the sequence dim of q (dim {q.dim() + sd} "
                f"of {list(q.shape)}) has {s} tokens but {what}. The layout is not guessed: build "
                f"the module with layout='BNSD' for q/k [B, N, S, D] or layout='BSND' for "
                f"[B, S, N, D]."
            )

        if k is not None and k.dim() != q.dim():
            raise ValueError(
                f"RotaryEmbedding(layout={self.layout!r}): k must have q's rank {q.dim()} (q "
                f"{list(q.shape)}), got k {list(k.shape)} of rank {k.dim()}"
            )
        if k is not None and k.shape[sd] != s:
            raise mismatch(f"k {list(k.shape)} has {k.shape[sd]}")
        if positions is not None:
            n = positions.shape[-1] if positions.dim() else 0
            if n != s:
                raise mismatch(f"positions {list(positions.shape)} has {n}")
        return s
