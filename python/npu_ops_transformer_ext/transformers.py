"""Drop-in RoPE for HF ``transformers``: ``apply_rotary_pos_emb`` and ``patch_transformers``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1) -> (q_out, k_out)`` has
the signature and the results of the function of that name in ``modeling_llama.py`` (and every
modeling file that copies it): ``q * cos + rotate_half(q) * sin`` with HF's own ``cos``/``sin``
(the output of the model's rotary embedding module, half mode), computed by one
``rope_matrix_qk`` call.

``apply_rotary_pos_emb_partial`` (GPT-NeoX's form: the first ``cos.shape[-1]`` dims rotate) and
``apply_rotary_pos_emb_keep_dtype`` (OLMo's form: the result cast back to q's dtype) cover the two
other forms found in transformers' modeling files.

``patch_transformers(model_or_module=None, *, families=None)`` switches models to them, in the
style of Liger-Kernel's ``apply_liger_kernel_to_llama``; ``unpatch_transformers`` switches back.

What is process-wide: HF's attention layers look ``apply_rotary_pos_emb`` up in their modeling
module's globals at call time, so patching replaces that one module-level name in each patched
family's modeling file (``transformers.models.llama.modeling_llama`` for LLaMA, ...). Every model
of a patched family in the process, including models you did not pass and models built later, then
uses ``rope_matrix``; other families are untouched (each modeling file has its own copy of the
function). No parameter, buffer, state dict or rotary module is changed. Importing this module
does not import ``transformers``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import textwrap
import threading
import types
import weakref
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from .matrices import get_half_matrix
from .ops import rope_matrix, rope_matrix_qk

__all__ = [
    "DEFAULT_FAMILIES",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_keep_dtype",
    "apply_rotary_pos_emb_partial",
    "patch_transformers",
    "patched_modules",
    "rope_matrix_enabled",
    "unpatch_transformers",
]

#: Families ``patch_transformers()`` switches when called without a model, module or ``families``.
DEFAULT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")

_MATS: dict = {}


def _half_matrix(d: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    key = (d, dtype, device)
    m = _MATS.get(key)
    if m is None:
        m = _MATS[key] = get_half_matrix(d, dtype=dtype, device=device)
    return m


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


def _rope_qk(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """``(q * cos + rotate_half(q) * sin, same for k)`` computed by the op in q's and k's dtypes."""
    if q.dtype != k.dtype:
        return _rope_one(q, cos, sin), _rope_one(k, cos, sin)
    cos, sin = _tables_for(cos, q.dtype), _tables_for(sin, q.dtype)
    if q.device.type != "cpu" and cos.dim() == q.dim() and cos.shape[0] > 1:
        # Per-sample tables [B, 1, S, D] (position_ids per batch row): the NPU kernel takes tables
        # that vary along one dim of x, so go sample by sample there.
        outs = [
            _rope_qk(q[i : i + 1], k[i : i + 1], cos[i : i + 1], sin[i : i + 1])
            for i in range(q.shape[0])
        ]
        return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
    return rope_matrix_qk(q, k, _half_matrix(q.shape[-1], q.dtype, q.device), sin, cos)


def _rope_one(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    m = _half_matrix(x.shape[-1], x.dtype, x.device)
    return rope_matrix(x, m, _tables_for(sin, x.dtype), _tables_for(cos, x.dtype))


# ---- patching -----------------------------------------------------------------------------------

_LOCK = threading.RLock()
#: modeling module name -> {"module", "orig", "holders"}; "holders" are the model ids and the
#: "process" token that asked for the patch.
_STATE: dict[str, dict] = {}
_PROCESS = "process"
_STANDARD: dict[tuple, object] = {}


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


#: The forms of ``apply_rotary_pos_emb`` that can be switched, each given by a family whose
#: modeling file defines it, with the drop-in that computes it.
_FORMS = (
    ("llama", "apply_rotary_pos_emb"),
    ("gpt_neox", "apply_rotary_pos_emb_partial"),
    ("olmo", "apply_rotary_pos_emb_keep_dtype"),
)


def _drop_in_for(mod: types.ModuleType, fn):
    """The drop-in computing ``fn`` (the module's ``apply_rotary_pos_emb``), or None: ``fn`` and the
    module's ``rotate_half`` must equal, as syntax trees, the installed LLaMA ``rotate_half`` and one
    of the ``_FORMS`` reference functions."""
    key = (mod.__name__, fn)
    if key not in _STANDARD:
        found = None
        llama = importlib.import_module("transformers.models.llama.modeling_llama")
        rh = getattr(mod, "rotate_half", None)
        tree = _function_ast(fn)
        if (
            tree is not None
            and rh is not None
            and _function_ast(rh) == _function_ast(llama.rotate_half)
        ):
            for family, name in _FORMS:
                try:
                    ref = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
                except ImportError:
                    continue
                ref_fn = _STATE.get(ref.__name__, {}).get("orig", ref.apply_rotary_pos_emb)
                if tree == _function_ast(ref_fn):
                    found = globals()[name]
                    break
        _STANDARD[key] = found
    return _STANDARD[key]


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


def _modules_of(model: torch.nn.Module) -> list[types.ModuleType]:
    import sys

    names = []
    for sub in _unwrap_model(model).modules():
        n = type(sub).__module__
        if n.startswith("transformers.models.") and n not in names:
            names.append(n)
    return [sys.modules[n] for n in names if hasattr(sys.modules[n], "apply_rotary_pos_emb")]


def _resolve(model_or_module, families, who: str) -> list[types.ModuleType]:
    if model_or_module is not None and families is not None:
        raise TypeError(f"{who}: pass a model or module, or families=, not both")
    if isinstance(model_or_module, torch.nn.Module):
        mods = _modules_of(model_or_module)
        if not mods:
            raise TypeError(
                f"{who}: {type(_unwrap_model(model_or_module)).__name__} is not a transformers model "
                f"with a modeling file that defines apply_rotary_pos_emb"
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


def _current(mod):
    st = _STATE.get(mod.__name__)
    return st["orig"] if st is not None else mod.apply_rotary_pos_emb


def patch_transformers(
    model_or_module: torch.nn.Module | types.ModuleType | str | None = None,
    *,
    families: Iterable[str] | str | None = None,
) -> list[str]:
    """Rotate q/k of HF transformers models with ``rope_matrix``; returns the patched module names.

    ``model_or_module``:
      * a model (``LlamaForCausalLM``, ``Qwen2Model``, a ``torch.compile`` wrapper of one, ...): the
        families of its modules;
      * a modeling module (``transformers.models.qwen3.modeling_qwen3``) or a family name
        (``"qwen3"``);
      * None: the families in ``families`` (names), by default ``DEFAULT_FAMILIES`` (LLaMA,
        Mistral, Qwen2, Qwen3).

    A family is patched only when its modeling file's ``rotate_half`` is LLaMA's and its
    ``apply_rotary_pos_emb`` is one of three forms, compared as syntax trees with the installed
    transformers: LLaMA's (``apply_rotary_pos_emb`` here), GPT-NeoX's partial rotary
    (``apply_rotary_pos_emb_partial``) or OLMo's cast back to q's dtype
    (``apply_rotary_pos_emb_keep_dtype``). Any other (interleaved pairs as in GPT-J and Cohere,
    float32 upcasts, ...) raises ``ValueError`` and nothing is patched. What changes is process-wide per family: see the module docstring. Patching twice
    is harmless; a model's patch is released when the model is garbage collected.
    """
    mods = _resolve(model_or_module, families, "patch_transformers")
    with _LOCK:
        drop_ins = {m.__name__: _drop_in_for(m, _current(m)) for m in mods}
        bad = [n for n, f in drop_ins.items() if f is None]
        if bad:
            raise ValueError(
                f"patch_transformers: the apply_rotary_pos_emb of {', '.join(bad)} is none of the "
                f"forms this module computes (q * cos + rotate_half(q) * sin as in LLaMA, over the "
                f"first cos.shape[-1] dims as in GPT-NeoX, or cast back to q.dtype as in OLMo); "
                f"nothing was patched"
            )
        if isinstance(model_or_module, torch.nn.Module):
            model = _unwrap_model(model_or_module)
            holder = id(model)
            if not any(holder in _STATE.get(m.__name__, {}).get("holders", ()) for m in mods):
                weakref.finalize(model, _release, holder)
        else:
            holder = _PROCESS
        for m in mods:
            st = _STATE.get(m.__name__)
            if st is None:
                st = _STATE[m.__name__] = {
                    "module": m,
                    "orig": m.apply_rotary_pos_emb,
                    "holders": set(),
                }
                m.apply_rotary_pos_emb = drop_ins[m.__name__]
            st["holders"].add(holder)
        return [m.__name__ for m in mods]


def _restore(name: str) -> None:
    st = _STATE.pop(name)
    st["module"].apply_rotary_pos_emb = st["orig"]


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
    """Undo ``patch_transformers``; returns the module names restored to HF's own function.

    * a model: releases that model's patch; a family stays patched while another patched model of
      it, or a patch asked for without a model, remains;
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
    """Names of the modeling modules whose ``apply_rotary_pos_emb`` is ``rope_matrix`` now."""
    with _LOCK:
        return sorted(_STATE)


@contextlib.contextmanager
def rope_matrix_enabled(
    model_or_module: torch.nn.Module | types.ModuleType | str | None = None,
    *,
    families: Iterable[str] | str | None = None,
) -> Iterator[list[str]]:
    """``with rope_matrix_enabled(model): ...`` patches on entry and restores on exit."""
    is_model = isinstance(model_or_module, torch.nn.Module)
    with _LOCK:
        before = {n: set(st["holders"]) for n, st in _STATE.items()}
        names = patch_transformers(model_or_module, families=families)
    try:
        yield names
    finally:
        if is_model:
            holder = id(_unwrap_model(model_or_module))
            if not any(holder in h for h in before.values()):
                unpatch_transformers(model_or_module)
        else:
            new = [n for n in names if n not in before]
            if new:
                unpatch_transformers(families=new)
