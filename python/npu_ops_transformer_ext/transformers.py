"""Drop-in RoPE for HF ``transformers``: ``apply_rotary_pos_emb`` and ``patch_transformers``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1) -> (q_out, k_out)`` has
the signature and the results of the function of that name in ``modeling_llama.py`` (and every
modeling file that copies it): ``q * cos + rotate_half(q) * sin`` with HF's own ``cos``/``sin``
(the output of the model's rotary embedding module, half mode), computed by one
``rope_matrix_qk`` call.

``apply_rotary_pos_emb_partial`` (GPT-NeoX's form: the first ``cos.shape[-1]`` dims rotate) and
``apply_rotary_pos_emb_keep_dtype`` (OLMo's form: the result cast back to q's dtype) cover the two
other forms found in transformers' modeling files. ``apply_rotary_pos_emb_interleave`` is
DeepSeek-V3's function of that name (q and k rotated in interleaved pairs, returned de-interleaved),
which its attention calls instead of ``apply_rotary_pos_emb`` when ``config.rope_interleave`` is set.

``patch_transformers(model_or_module=None, *, families=None)`` switches models to them, in the
style of Liger-Kernel's ``apply_liger_kernel_to_llama``; ``unpatch_transformers`` switches back.

What is process-wide: HF's attention layers look ``apply_rotary_pos_emb`` (and
``apply_rotary_pos_emb_interleave``) up in their modeling module's globals at call time, so patching
replaces those module-level names in each patched family's modeling file
(``transformers.models.llama.modeling_llama`` for LLaMA, ...). Every model
of a patched family in the process, including models you did not pass and models built later, then
uses ``rope_matrix``; other families are untouched (each modeling file has its own copy of the
function). No parameter, buffer, state dict or rotary module is changed. Importing this module
does not import ``transformers``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import textwrap
import threading
import types
import weakref
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from ._per_sample import rope, rope_qk
from .matrices import cached_matrix, get_half_matrix, get_interleave_matrix

__all__ = [
    "DEFAULT_FAMILIES",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_interleave",
    "apply_rotary_pos_emb_keep_dtype",
    "apply_rotary_pos_emb_partial",
    "patch_transformers",
    "patched_modules",
    "rope_matrix_enabled",
    "unpatch_transformers",
]

#: Families ``patch_transformers()`` switches when called without a model, module or ``families``.
DEFAULT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")

# matrix(d, dtype, device), made once each
_half_matrix = functools.partial(cached_matrix, get_half_matrix)
_interleave_matrix = functools.partial(cached_matrix, get_interleave_matrix)


def apply_rotary_pos_emb(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """HF's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) -> (q_embed, k_embed)``.

    Shapes as in HF: q ``[B, Hq, S, D]``, k ``[B, Hk, S, D]`` (``unsqueeze_dim=1``; with
    ``[B, S, H, D]`` pass ``unsqueeze_dim=2``); cos and sin ``[B, S, D]`` (or ``[S, D]``) as the
    model's rotary embedding returns them, in half mode (``cat(freqs, freqs)``). They are
    unsqueezed at ``unsqueeze_dim`` and must then broadcast to q and k.

    ``position_ids`` is accepted for the older HF signature: it is ignored, as HF ignores it, except
    for 2-D tables ``[max_len, D]`` (the oldest form), which are indexed with it first. An int in
    its place is transformers 5's positional ``unsqueeze_dim``.

    Results equal HF's ``q * cos + rotate_half(q) * sin``: the output dtype is HF's
    (``q.dtype`` promoted with ``cos.dtype`` and ``sin.dtype``). In float32 the values are equal
    bit for bit (the op computes the same two products and one sum, and ``rotate_half`` is exact).
    In bfloat16/float16 the op computes in float32 and rounds once, where HF rounds each product and
    the sum to the half type: an element differs from HF's by at most HF's own rounding error
    (measured on tiny LLaMA/Mistral/Qwen models: logits within one bf16 ulp at the logits' scale).
    """
    cos, sin = _unsqueezed(cos, sin, position_ids, unsqueeze_dim)
    qd, kd = _hf_dtypes(q, k, cos, sin)
    return _rope_qk(q.to(qd), k.to(kd), cos, sin)


def apply_rotary_pos_emb_partial(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """The partial-rotary form of HF's ``apply_rotary_pos_emb`` (GPT-NeoX, Qwen3.5, GLM-4 MoE, ...):
    the first ``r = cos.shape[-1]`` dims of q and k rotate as in ``apply_rotary_pos_emb``, the
    rest pass through unchanged (``cat([rotated, q[..., r:]], -1)``). Same arguments and numerics."""
    cos, sin = _unsqueezed(cos, sin, position_ids, unsqueeze_dim)
    r = cos.shape[-1]
    qd, kd = _hf_dtypes(q, k, cos, sin)
    if r == q.shape[-1] and r == k.shape[-1]:
        return _rope_qk(q.to(qd), k.to(kd), cos, sin)
    qe, ke = _rope_qk(q[..., :r].to(qd), k[..., :r].to(kd), cos, sin)
    return torch.cat([qe, q[..., r:]], dim=-1), torch.cat([ke, k[..., r:]], dim=-1)


def apply_rotary_pos_emb_keep_dtype(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """The OLMo form of HF's ``apply_rotary_pos_emb``: HF's formula, returned in q's and k's own
    dtypes (``q_embed.to(q.dtype)``). With float32 tables and bf16/fp16 q this is one op call on q
    as it is (the op computes in float32 and rounds once), bit for bit what HF computes."""
    cos, sin = _unsqueezed(cos, sin, position_ids, unsqueeze_dim)
    small = (torch.bfloat16, torch.float16, torch.float32)
    if torch.promote_types(cos.dtype, sin.dtype) in small and q.dtype in small and k.dtype in small:
        return _rope_qk(q, k, cos, sin)
    qd, kd = _hf_dtypes(q, k, cos, sin)
    qe, ke = _rope_qk(q.to(qd), k.to(kd), cos, sin)
    return qe.to(q.dtype), ke.to(k.dtype)


def apply_rotary_pos_emb_interleave(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Tensor | None = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """DeepSeek-V3's ``apply_rotary_pos_emb_interleave(q, k, cos, sin, position_ids=None,
    unsqueeze_dim=1)``: the dims of q and k rotate in adjacent pairs ``(2i, 2i+1)`` by the angle of
    ``cos[..., i]``/``sin[..., i]`` (the first half of HF's ``cat(freqs, freqs)`` tables), and the
    result comes out de-interleaved: ``cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)`` with
    ``x1, x2 = x[..., 0::2], x[..., 1::2]``. ``position_ids`` is ignored, as HF ignores it.

    One ``rope_matrix_qk`` call with ``get_interleave_matrix(D)`` on q and k as they are, with the
    tables laid out pairwise (``[c0, c0, c1, c1, ...]``); its output ``y`` has the pair results at
    ``2i``/``2i+1``, and is de-interleaved (``cat(y[..., 0::2], y[..., 1::2])``) in one copy.
    Output dtype and numerics as ``apply_rotary_pos_emb``: float32 bit for bit HF's; bf16/fp16
    computed in float32 and rounded once.
    """
    h = cos.shape[-1] // 2
    cos = cos[..., :h].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    sin = sin[..., :h].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    qd, kd = _hf_dtypes(q, k, cos, sin)
    outs = _rope_qk(q.to(qd), k.to(kd), cos, sin, _interleave_matrix)
    return tuple(_deinterleaved(y) for y in outs)


def _deinterleaved(y: Tensor) -> Tensor:
    """``cat(y[..., 0::2], y[..., 1::2], -1)``, as one copy."""
    return y.unflatten(-1, (y.shape[-1] // 2, 2)).transpose(-1, -2).flatten(-2)


def _hf_dtypes(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """The dtypes of HF's ``q * cos + rotate_half(q) * sin`` and of the same for k."""
    tab = torch.promote_types(cos.dtype, sin.dtype)
    return torch.promote_types(q.dtype, tab), torch.promote_types(k.dtype, tab)


def _unsqueezed(cos: Tensor, sin: Tensor, position_ids, unsqueeze_dim: int):
    if isinstance(position_ids, int):
        # transformers 5's signature passed positionally: (q, k, cos, sin, unsqueeze_dim)
        unsqueeze_dim, position_ids = position_ids, None
    if position_ids is not None and cos.dim() == 2:
        cos, sin = cos[position_ids], sin[position_ids]
    return cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)


def _tables_for(t: Tensor, dtype: torch.dtype) -> Tensor:
    """A table the op accepts for x of ``dtype``, holding the same values: itself when float32 or
    ``dtype``, else float32 for a half type, else ``dtype``."""
    if t.dtype in (dtype, torch.float32):
        return t
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t.to(dtype)


def _rope_qk(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, matrix=_half_matrix
) -> tuple[Tensor, Tensor]:
    """``(q * cos + (q @ R) * sin, same for k)`` computed by the op in q's and k's dtypes, with
    ``R = matrix(D, dtype, device)``: ``rotate_half`` by default."""
    if q.dtype != k.dtype:
        return _rope_one(q, cos, sin, matrix), _rope_one(k, cos, sin, matrix)
    cos, sin = _tables_for(cos, q.dtype), _tables_for(sin, q.dtype)
    # Per-sample tables [B, 1, S, D] (position_ids per batch row) go sample by sample off the CPU.
    return rope_qk(q, k, matrix(q.shape[-1], q.dtype, q.device), sin, cos)


def _rope_one(x: Tensor, cos: Tensor, sin: Tensor, matrix=_half_matrix) -> Tensor:
    m = matrix(x.shape[-1], x.dtype, x.device)
    return rope(x, m, _tables_for(sin, x.dtype), _tables_for(cos, x.dtype))


# ---- patching -----------------------------------------------------------------------------------

_LOCK = threading.RLock()
#: modeling module name -> {"module", "orig": {function name: HF's function}, "holders"}; the
#: holders are what keeps the family patched: model ids, the "process" token (a patch asked for
#: without a model) and one token per ``rope_matrix_enabled`` block.
_STATE: dict[str, dict] = {}
_PROCESS = "process"
_STANDARD: dict[tuple, object] = {}

#: The module-level functions patching replaces, in every modeling module that defines them.
_NAMES = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave")


def _function_ast(fn) -> str | None:
    """The AST of a function's body (docstring and decorators dropped) and arguments, as text."""
    try:
        src = inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return None
    node = ast.parse(textwrap.dedent(src)).body[0]
    if not isinstance(node, ast.FunctionDef):
        return None
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(node.args) + ast.dump(ast.Module(body=body, type_ignores=[]))


#: For each name in ``_NAMES``, the forms that can be switched, each given by a family whose
#: modeling file defines it under that name, with the drop-in that computes it.
_FORMS = {
    "apply_rotary_pos_emb": (
        ("llama", "apply_rotary_pos_emb"),
        ("gpt_neox", "apply_rotary_pos_emb_partial"),
        ("olmo", "apply_rotary_pos_emb_keep_dtype"),
    ),
    "apply_rotary_pos_emb_interleave": (("deepseek_v3", "apply_rotary_pos_emb_interleave"),),
}


def _computes_interleave(fn) -> bool:
    """Whether ``fn`` computes what ``apply_rotary_pos_emb_interleave`` does, checked in float64 on
    tables whose halves differ: transformers releases whose function reads both halves of the
    tables (de-interleave, then ``rotate_half``) compute something else for such tables."""
    g = torch.Generator().manual_seed(0)
    kw = {"dtype": torch.float64, "device": "cpu", "generator": g}
    q, k = (torch.randn(1, h, 3, 8, **kw) for h in (2, 1))
    cos, sin = (torch.randn(1, 3, 8, **kw) for _ in range(2))
    try:
        got = fn(q, k, cos, sin)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return False
    c, s = cos[:, None, :, :4], sin[:, None, :, :4]
    for x, y in zip((q, k), got):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        want = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        if not (isinstance(y, Tensor) and y.shape == want.shape and torch.allclose(y, want)):
            return False
    return True


def _drop_in_for(mod: types.ModuleType, name: str, fn):
    """The drop-in computing ``fn`` (HF's function ``name`` of ``mod``), or None: ``fn`` must equal,
    as a syntax tree, one of the ``_FORMS[name]`` reference functions of the installed
    transformers, and if it calls ``rotate_half``, the module's must equal LLaMA's."""
    key = (mod.__name__, name, fn)
    if key not in _STANDARD:
        found = None
        tree = _function_ast(fn)
        code = getattr(inspect.unwrap(fn), "__code__", None)
        uses_rh = code is None or "rotate_half" in code.co_names
        if tree is not None and (not uses_rh or _rotate_half_is_llamas(mod)):
            for family, drop_in in _FORMS[name]:
                try:
                    ref = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
                except ImportError:
                    continue
                ref_fn = _current(ref, name)
                if ref_fn is not None and tree == _function_ast(ref_fn):
                    if drop_in != "apply_rotary_pos_emb_interleave" or _computes_interleave(ref_fn):
                        found = globals()[drop_in]
                    break
        _STANDARD[key] = found
    return _STANDARD[key]


def _rotate_half_is_llamas(mod: types.ModuleType) -> bool:
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    rh = getattr(mod, "rotate_half", None)
    return rh is not None and _function_ast(rh) == _function_ast(llama.rotate_half)


def _family_module(name: str) -> types.ModuleType:
    mod_name = name if "." in name else f"transformers.models.{name}.modeling_{name}"
    try:
        return importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(
            f"patch_transformers: no transformers modeling module {mod_name!r} for family {name!r} "
            f"(family names are the folder names under transformers/models, e.g. 'llama', 'qwen2')"
        ) from e


def _unwrap_model(m):
    return getattr(m, "_orig_mod", m)  # torch.compile's OptimizedModule


def _rope_names(mod: types.ModuleType) -> list[str]:
    """The names of ``_NAMES`` that ``mod`` defines."""
    return [n for n in _NAMES if callable(getattr(mod, n, None))]


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of every function, class body and comprehension nested in it."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _loads_global(mod: types.ModuleType, names: Iterable[str]) -> bool:
    """Whether code of ``mod`` other than their own definitions uses any of ``names`` (a global of
    ``mod``): in a function or method defined in ``mod``. A modeling file can define HF's
    ``apply_rotary_pos_emb`` and never call it (a family without RoPE); patching it changes nothing."""
    names = set(names)
    seen: set[int] = set()

    def functions(obj, depth=0):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            yield from (f for f in (obj.fget, obj.fset, obj.fdel) if f is not None)
        elif isinstance(obj, types.FunctionType):
            yield obj
        elif isinstance(obj, type) and depth < 3:
            for v in vars(obj).values():
                yield from functions(v, depth + 1)

    for obj in list(vars(mod).values()):
        if getattr(obj, "__module__", None) != mod.__name__:
            continue
        for f in functions(obj):
            f = inspect.unwrap(f)
            if id(f) in seen or f.__globals__ is not vars(mod):
                continue
            seen.add(id(f))
            if f.__name__ in names and f is vars(mod).get(f.__name__):
                continue  # the definition itself (a recursive call would be odd; ignored)
            if any(names.intersection(c.co_names) for c in _codes(f.__code__)):
                return True
    return False


def _modules_of(model: torch.nn.Module) -> list[types.ModuleType]:
    """The modeling modules of ``model``'s submodules that define and use a function of ``_NAMES``."""
    import sys

    names = []
    for sub in _unwrap_model(model).modules():
        n = type(sub).__module__
        if n.startswith("transformers.models.") and n not in names:
            names.append(n)
    mods = [sys.modules[n] for n in names]
    return [m for m in mods if (defined := _rope_names(m)) and _loads_global(m, defined)]


def _resolve(model_or_module, families, who: str) -> list[types.ModuleType]:
    if model_or_module is not None and families is not None:
        raise TypeError(f"{who}: pass a model or module, or families=, not both")
    if isinstance(model_or_module, torch.nn.Module):
        mods = _modules_of(model_or_module)
        if not mods:
            raise TypeError(
                f"{who}: {type(_unwrap_model(model_or_module)).__name__} is not a transformers model "
                f"with a modeling file that defines and calls apply_rotary_pos_emb (a family that "
                f"applies no RoPE, or applies it otherwise, has nothing to patch)"
            )
        return mods
    if isinstance(model_or_module, types.ModuleType):
        return [model_or_module]
    if isinstance(model_or_module, str):
        return [_family_module(model_or_module)]
    if model_or_module is not None:
        raise TypeError(
            f"{who}: model_or_module must be a transformers model, a modeling module, a family name "
            f"or None, got {type(model_or_module).__name__}"
        )
    names = (
        DEFAULT_FAMILIES
        if families is None
        else ([families] if isinstance(families, str) else families)
    )
    return [_family_module(n) for n in names]


def _current(mod: types.ModuleType, name: str):
    """HF's own function ``name`` of ``mod`` (None if it has none), patched or not."""
    st = _STATE.get(mod.__name__)
    if st is not None and name in st["orig"]:
        return st["orig"][name]
    return getattr(mod, name, None)


def _drop_ins(mods: list[types.ModuleType], who: str) -> dict[str, dict[str, object]]:
    """``{module name: {function name: drop-in}}`` for ``mods``; ValueError if any is missing."""
    plan, bad = {}, []
    for m in mods:
        names = _rope_names(m) or ["apply_rotary_pos_emb"]
        plan[m.__name__] = {n: _drop_in_for(m, n, _current(m, n)) for n in names}
        bad += [f"{m.__name__}.{n}" for n, f in plan[m.__name__].items() if f is None]
    if bad:
        raise ValueError(
            f"{who}: {', '.join(bad)} is none of the forms this module computes "
            f"(q * cos + rotate_half(q) * sin as in LLaMA, over the first cos.shape[-1] dims as in "
            f"GPT-NeoX, or cast back to q.dtype as in OLMo; DeepSeek-V3's "
            f"apply_rotary_pos_emb_interleave); nothing was patched"
        )
    return plan


def _hold(mods: list[types.ModuleType], plan: dict, holder) -> list[str]:
    """Adds ``holder`` to each family of ``mods``, patching those not patched yet."""
    for m in mods:
        st = _STATE.get(m.__name__)
        if st is None:
            fns = plan[m.__name__]
            st = _STATE[m.__name__] = {
                "module": m,
                "orig": {n: getattr(m, n) for n in fns},
                "holders": set(),
            }
            for n, f in fns.items():
                setattr(m, n, f)
        st["holders"].add(holder)
    return [m.__name__ for m in mods]


def patch_transformers(
    model_or_module: torch.nn.Module | types.ModuleType | str | None = None,
    *,
    families: Iterable[str] | str | None = None,
) -> list[str]:
    """Rotate q/k of HF transformers models with ``rope_matrix``; returns the patched module names.

    ``model_or_module``:
      * a model (``LlamaForCausalLM``, ``Qwen2Model``, a ``torch.compile`` wrapper of one, ...): the
        families of its modules whose modeling file calls its RoPE function (Jamba's defines
        ``apply_rotary_pos_emb`` and never calls it; a model with no such family is a TypeError);
      * a modeling module (``transformers.models.qwen3.modeling_qwen3``) or a family name
        (``"qwen3"``);
      * None: the families in ``families`` (names), by default ``DEFAULT_FAMILIES`` (LLaMA,
        Mistral, Qwen2, Qwen3).

    A family is patched only when each of its modeling file's RoPE functions is a form this module
    computes, compared as syntax trees with the installed transformers: its
    ``apply_rotary_pos_emb`` LLaMA's (``apply_rotary_pos_emb`` here), GPT-NeoX's partial rotary
    (``apply_rotary_pos_emb_partial``) or OLMo's cast back to q's dtype
    (``apply_rotary_pos_emb_keep_dtype``), with LLaMA's ``rotate_half``; and its
    ``apply_rotary_pos_emb_interleave``, if it has one, DeepSeek-V3's
    (``apply_rotary_pos_emb_interleave`` here). Any other (interleaved pairs as in GPT-J and
    Cohere, float32 upcasts, ...) raises ``ValueError`` and nothing is patched. What changes is
    process-wide per family: see the module docstring. Patching twice is harmless; a model's patch
    is released when the model is garbage collected.
    """
    mods = _resolve(model_or_module, families, "patch_transformers")
    with _LOCK:
        plan = _drop_ins(mods, "patch_transformers")
        if isinstance(model_or_module, torch.nn.Module):
            model = _unwrap_model(model_or_module)
            holder = id(model)
            if not any(holder in _STATE.get(m.__name__, {}).get("holders", ()) for m in mods):
                weakref.finalize(model, _release, holder)
        else:
            holder = _PROCESS
        return _hold(mods, plan, holder)


def _restore(name: str) -> None:
    st = _STATE.pop(name)
    for n, f in st["orig"].items():
        setattr(st["module"], n, f)


def _release(holder) -> None:
    with _LOCK:
        for name in [n for n, st in _STATE.items() if holder in st["holders"]]:
            _STATE[name]["holders"].discard(holder)
            if not _STATE[name]["holders"]:
                _restore(name)


def unpatch_transformers(
    model_or_module: torch.nn.Module | types.ModuleType | str | None = None,
    *,
    families: Iterable[str] | str | None = None,
) -> list[str]:
    """Undo ``patch_transformers``; returns the module names restored to HF's own functions.

    * a model: releases that model's patch; a family stays patched while another patched model of
      it, a patch asked for without a model, or a ``rope_matrix_enabled`` block remains;
    * a modeling module, a family name or ``families``: restores those families now;
    * nothing: restores every patched family.
    """
    with _LOCK:
        if model_or_module is None and families is None:
            names = list(_STATE)
            for n in names:
                _restore(n)
            return names
        if isinstance(model_or_module, torch.nn.Module):
            holder = id(_unwrap_model(model_or_module))
            before = set(_STATE)
            _release(holder)
            return sorted(before - set(_STATE))
        mods = _resolve(model_or_module, families, "unpatch_transformers")
        names = [m.__name__ for m in mods if m.__name__ in _STATE]
        for n in names:
            _restore(n)
        return names


def patched_modules() -> list[str]:
    """Names of the modeling modules whose RoPE functions are ``rope_matrix`` now."""
    with _LOCK:
        return sorted(_STATE)


class _Block:
    """The holder of one ``rope_matrix_enabled`` block."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<rope_matrix_enabled block {id(self):#x}>"


@contextlib.contextmanager
def rope_matrix_enabled(
    model_or_module: torch.nn.Module | types.ModuleType | str | None = None,
    *,
    families: Iterable[str] | str | None = None,
) -> Iterator[list[str]]:
    """``with rope_matrix_enabled(model): ...`` patches on entry and restores on exit.

    Takes what ``patch_transformers`` takes and yields the module names. The block holds the
    families for itself, as a model or a patch by name does: on exit it releases that hold only, so
    a family patched before the block, or by a model or name patched inside it, stays patched, and
    any other is restored. Nested and overlapping blocks each release their own hold."""
    mods = _resolve(model_or_module, families, "rope_matrix_enabled")
    block = _Block()
    with _LOCK:
        names = _hold(mods, _drop_ins(mods, "rope_matrix_enabled"), block)
    try:
        yield names
    finally:
        _release(block)
