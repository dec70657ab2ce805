"""Switch a loaded diffusers transformer to ``rope_matrix`` and back, without editing diffusers.

    from npu_ops_transformer_ext.diffusers_patch import patch_rope, unpatch_rope, rope_matrix_enabled

    patch_rope(pipe.transformer)          # Wan, FLUX, HunyuanVideo or Qwen-Image
    ...                                   # every attention now rotates q/k with rope_matrix
    unpatch_rope(pipe.transformer)        # back to diffusers' own code

    with rope_matrix_enabled(pipe.transformer):
        pipe(...)

    compiled = torch.compile(pipe.transformer)
    patch_rope(compiled)                  # a compiled model works too, before or after it has run

**What is changed, and only there.** Each attention module of *the patched model* gets its own
copy of its attention processor, of a subclass whose ``__call__`` is diffusers' own ``__call__``
code with the one rotation function it uses swapped for this package's (the copy keeps a reference
to the processor it replaced, which ``unpatch_rope`` puts back):

* FLUX (``FluxTransformer2DModel``): ``apply_rotary_emb`` -> ``models.apply_rotary_emb``
  (same arguments).
* HunyuanVideo (``HunyuanVideoTransformer3DModel``): the ``apply_rotary_emb`` its processor
  imports from ``diffusers.models.embeddings`` at call time -> ``models.apply_rotary_emb``.
* Qwen-Image (``QwenImageTransformer2DModel``): ``apply_rotary_emb_qwen`` ->
  ``models.apply_rotary_emb_qwen``.
* Wan (``WanTransformer3DModel`` and any model built from ``WanAttention``): the rotation Wan's
  processor defines inside ``__call__`` -> ``rope_matrix`` in interleave mode on the same tables.

Nothing module-level of diffusers is replaced: other models in the process, patched or not, of
the same family or another, keep diffusers' code. The patched ``__call__`` runs with the globals
of the diffusers module that defines it, so every other name it uses (``dispatch_attention_fn``,
...) is looked up there at call time, as diffusers' ``__call__`` does: rebinding a module-level
name of diffusers (what attention-backend libraries do) reaches patched models too, before or
after patching, compiled or not. The process-wide traces are extra attributes whose names no
diffusers code uses: ``_npu_ops_rope_apply_rotary_emb`` on ``diffusers.models.embeddings``
(HunyuanVideo's processors import it) and on FLUX's transformer module,
``_npu_ops_rope_apply_rotary_emb_qwen`` on Qwen-Image's, ``_npu_ops_rope_models`` on the module
of the Wan processor. Parameters, buffers and ``state_dict`` are unchanged.

**Processors set after patching.** The state is the processors themselves, not a flag on the
model. After ``model.set_attn_processor(...)`` (what loading a LoRA or an IP-Adapter may do),
``is_patched`` tells whether the processors now in place are patched; ``patch_rope`` patches every
processor that is not (and leaves patched ones as they are); ``unpatch_rope`` gives each module
whose processor is a patched one the processor that one replaced, and leaves any other processor,
e.g. one set after patching, where it is.

**torch.compile.** ``patch_rope`` accepts the module ``torch.compile`` returns (it patches the
model inside). Patching or unpatching after a compiled model has run is safe: when torch.compile
has compiled anything in the process, ``patch_rope`` and ``unpatch_rope`` drop the compiled code
(``torch._dynamo.reset_code_caches()``), so the next call recompiles and runs the patched (or
restored) code. The compiled-code guards alone would not notice the new processors. The cost:
*every* compiled model in the process recompiles on its next call; patch before compiling to
avoid it.

**rope_matrix_enabled blocks** on one model may nest or overlap: each block holds the processors
it patched and those other active blocks patched; a processor is restored when the last block
holding it exits.
"""

from __future__ import annotations

import contextlib
import copy
import copyreg
import importlib
import sys
import types
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from torch import nn

from . import models

__all__ = ["SUPPORTED", "is_patched", "patch_rope", "rope_matrix_enabled", "unpatch_rope"]

M = TypeVar("M", bound=nn.Module)

_CLASS_FAMILY = {
    "FluxTransformer2DModel": "flux",
    "HunyuanVideoTransformer3DModel": "hunyuan_video",
    "QwenImageTransformer2DModel": "qwen_image",
    "WanTransformer3DModel": "wan",
}
#: The diffusers model classes ``patch_rope`` knows (any model built from ``WanAttention`` too).
SUPPORTED = tuple(_CLASS_FAMILY)

_PREFIX = "_npu_ops_rope_"
_ORIGINAL = _PREFIX + "original"  # attribute of a patched processor: the processor it replaced
# family -> name of the rotation function in the processor's __call__
_TARGET = {
    "flux": "apply_rotary_emb",
    "hunyuan_video": "apply_rotary_emb",
    "qwen_image": "apply_rotary_emb_qwen",
    "wan": "apply_rotary_emb",
}
_patched_classes: dict = {}  # (processor class, family) -> patched subclass, or None
_ours: set = set()  # the patched subclasses
# (id(module), id(processor)) -> [module, patched processor, number of active
# rope_matrix_enabled blocks holding it]: what a block patched, until the last block holding it ends
_block_holds: dict = {}


def _wan_rotate(hidden_states, freqs_cos, freqs_sin):
    # Replaces the rotation Wan's processor defines in __call__ (same arguments: x [B, S, H, D],
    # tables [1, S, 1, D] with each pair's angle repeated, i.e. interleave mode). Runs with the
    # processor's globals, where patch_rope puts this package's ``models`` under the name below.
    return _npu_ops_rope_models.apply_rotary_emb(  # noqa: F821
        hidden_states, (freqs_cos[0, :, 0], freqs_sin[0, :, 0]), True, -1, 1
    )


def _replacement(family: str) -> Callable:
    return models.apply_rotary_emb_qwen if family == "qwen_image" else models.apply_rotary_emb


def _unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile(model)`` (an ``OptimizedModule``), else ``model``."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


def _family(transformer: nn.Module) -> str:
    for cls in type(transformer).__mro__:
        fam = _CLASS_FAMILY.get(cls.__name__)
        if fam:
            return fam
    if any(type(m).__name__ == "WanAttention" for m in transformer.modules()):
        return "wan"
    raise TypeError(
        f"patch_rope: unsupported model {type(transformer).__name__}; supported: "
        f"{', '.join(SUPPORTED)} (or torch.compile of one of them)"
    )


def _add_global(glb: dict, name: str, value: Any) -> None:
    """Adds ``name`` (one of this package's, which no diffusers code uses) to a diffusers module's
    globals ``glb``. The patched ``__call__`` runs with that module's own globals, so every other
    name it uses is looked up there at call time, as in diffusers' ``__call__``."""
    glb[name] = value


def _rewritten_call(fn: types.FunctionType, family: str) -> types.FunctionType | None:
    """``fn`` (a processor's ``__call__``) with its rotation swapped, or None when it has none."""
    code = fn.__code__
    name = _TARGET[family]
    glb = fn.__globals__  # diffusers' module globals, live; only a name of ours is added
    if family == "wan":
        consts = list(code.co_consts)
        hits = [
            i
            for i, c in enumerate(consts)
            if isinstance(c, types.CodeType) and c.co_name == name and not c.co_freevars
        ]
        if not hits:
            return None
        for i in hits:
            consts[i] = _wan_rotate.__code__.replace(
                co_name=consts[i].co_name, co_firstlineno=consts[i].co_firstlineno
            )
        _add_global(glb, _PREFIX + "models", models)
        new_code = code.replace(co_consts=tuple(consts))
    else:
        if name not in code.co_names:
            return None
        new_name = _PREFIX + name
        # Global loads (FLUX, Qwen-Image) find the new name in the module's globals; the call-time
        # ``from ..embeddings import apply_rotary_emb`` (HunyuanVideo) imports the new name.
        names = tuple(new_name if n == name else n for n in code.co_names)
        new_code = code.replace(co_names=names)
        if family != "hunyuan_video" or name in glb:
            _add_global(glb, new_name, _replacement(family))
        if family == "hunyuan_video":
            emb = importlib.import_module("diffusers.models.embeddings")
            setattr(emb, new_name, _replacement(family))
    new = types.FunctionType(new_code, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__module__ = fn.__module__
    return new


def _patched_class(cls: type, family: str) -> type | None:
    key = (cls, family)
    if key not in _patched_classes:
        call = cls.__dict__.get("__call__") or getattr(cls, "__call__", None)  # noqa: B004
        new_call = _rewritten_call(call, family) if isinstance(call, types.FunctionType) else None
        new_cls = None
        if new_call is not None:
            attrs = {"__call__": new_call, "__module__": cls.__module__, _PREFIX + "family": family,
                     "__reduce_ex__": _reduce_patched}
            new_cls = type(cls.__name__, (cls,), attrs)
            _ours.add(new_cls)
        _patched_classes[key] = new_cls
    return _patched_classes[key]


def _reduce_patched(self: Any, protocol: int) -> tuple:
    """Pickling of a patched processor (``torch.save`` of a whole patched model, ``copy``): its
    class has diffusers' module and name, under which pickle finds diffusers' own class and
    refuses, so it is named by that class and the family, and made again on loading."""
    cls = type(self)
    if cls not in _ours:  # a subclass of a patched class: pickled by its own name
        return object.__reduce_ex__(self, protocol)
    base, family = cls.__bases__[0], getattr(cls, _PREFIX + "family")
    rv = object.__reduce_ex__(self, max(protocol, 2))  # the processor's own __reduce__ if it has one
    if not isinstance(rv, tuple) or len(rv) < 2:
        return rv
    fn, args = rv[0], rv[1]
    if fn is copyreg.__newobj__ and args and args[0] is cls:  # (cls, *args)
        return (_new_patched, (base, family, args[1:], {}), *rv[2:])
    if fn is copyreg.__newobj_ex__ and args and args[0] is cls:  # (cls, args, kwargs)
        return (_new_patched, (base, family, tuple(args[1]), dict(args[2])), *rv[2:])
    if fn is cls:  # a __reduce__ that calls the class
        return (_call_patched, (base, family, tuple(args)), *rv[2:])
    return rv


def _loaded_class(base: type, family: str) -> type:
    cls = _patched_class(base, family)
    if cls is None:
        raise TypeError(f"cannot load a processor patched by patch_rope: this version of diffusers' "
                        f"{base.__qualname__} is not one patch_rope rewrites")
    return cls


def _new_patched(base: type, family: str, args: tuple, kwargs: dict) -> Any:
    """A new patched processor of diffusers' class ``base`` (unpickling; see ``_reduce_patched``)."""
    cls = _loaded_class(base, family)
    return cls.__new__(cls, *args, **kwargs)


def _call_patched(base: type, family: str, args: tuple) -> Any:
    """The patched class of ``base`` called with ``args`` (unpickling a processor whose own
    ``__reduce__`` calls its class)."""
    return _loaded_class(base, family)(*args)


def _is_ours(proc: Any) -> bool:
    """Whether ``proc`` is a patched processor (one of ``patch_rope``'s, or a copy of one)."""
    return type(proc) in _ours


def _processors(model: nn.Module) -> list[tuple[nn.Module, Any]]:
    """(module, processor) for every module of ``model`` that has an attention processor."""
    found = []
    for module in model.modules():
        proc = getattr(module, "processor", None)
        if proc is not None and not isinstance(proc, type):
            found.append((module, proc))
    return found


def _original(proc: Any) -> Any:
    """The processor the patched processor ``proc`` replaced."""
    orig = proc.__dict__.get(_ORIGINAL, None) if hasattr(proc, "__dict__") else None
    if orig is None:  # a patched processor made some other way: its own state, diffusers' class
        orig = copy.copy(proc)
        orig.__class__ = type(proc).__bases__[0]
        orig.__dict__.pop(_ORIGINAL, None)
    return orig


def _set_processor(module: nn.Module, processor: Any) -> None:
    if isinstance(module._modules.get("processor"), nn.Module) or isinstance(processor, nn.Module):
        module._modules.pop("processor", None)
        module.__dict__.pop("processor", None)
    module.processor = processor


def _drop_compiled_code() -> None:
    """Drops the code torch.compile has cached in this process, so that every compiled model
    retraces on its next call and sees the processors as they are now. The cached code's guards do
    not reliably notice a replaced processor, so this is what makes patching after compile safe."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return
    try:
        from torch._dynamo import convert_frame

        if not (convert_frame.input_codes.seen or convert_frame.output_codes.seen):
            return  # nothing was compiled yet
    except (ImportError, AttributeError):
        pass
    reset = getattr(dynamo, "reset_code_caches", None) or dynamo.reset
    reset()


# ---- public -------------------------------------------------------------------------------------


def is_patched(transformer: nn.Module) -> bool:
    """Whether the attention processors ``transformer`` (or the model inside
    ``torch.compile(transformer)``) has now are patched: at least one is, and none is left that
    ``patch_rope`` would patch. False again once ``set_attn_processor`` has put unpatched
    processors in (``patch_rope`` then patches them)."""
    procs = [p for _, p in _processors(_unwrap(transformer))]
    ours = [p for p in procs if _is_ours(p)]
    if not ours:
        return False
    family = getattr(type(ours[0]), _PREFIX + "family")
    return all(_is_ours(p) or _patched_class(type(p), family) is None for p in procs)


def _patch(model: nn.Module) -> list[tuple[nn.Module, Any]]:
    """Patches every processor of ``model`` that is not patched yet; returns (module, new
    processor) for those."""
    family = _family(model)
    done, already = [], False
    for module, proc in _processors(model):
        if _is_ours(proc):
            already = True
            continue
        new_cls = _patched_class(type(proc), family)
        if new_cls is None:
            continue
        new_proc = copy.copy(proc)
        new_proc.__class__ = new_cls
        object.__setattr__(new_proc, _ORIGINAL, proc)
        _set_processor(module, new_proc)
        done.append((module, new_proc))
    if not done and not already:
        raise TypeError(
            f"patch_rope: no attention processor of this {type(model).__name__} applies diffusers' "
            f"rotary embedding ({_TARGET[family]}); custom processors are not patched: restore "
            "diffusers' default ones (model.set_default_attn_processor() or the family's "
            "processor class) before patch_rope"
        )
    if done:
        _drop_compiled_code()
    return done


def _restore(patched: list[tuple[nn.Module, Any]]) -> None:
    """Gives each module its processor from before patching, where the processor now in place is
    the given patched one; other modules are left alone."""
    changed = False
    for module, proc in patched:
        if getattr(module, "processor", None) is proc:
            _set_processor(module, _original(proc))
            changed = True
    if changed:
        _drop_compiled_code()


def patch_rope(transformer: M) -> M:
    """Make ``transformer`` rotate q/k with ``rope_matrix``; returns ``transformer``.

    ``transformer``: a diffusers Wan, FLUX, HunyuanVideo or Qwen-Image transformer, or the module
    ``torch.compile`` made of one. Only this model's attention processors are replaced (by
    per-module copies); other models in the process are unaffected. Patches every processor that
    is not patched yet, so after ``set_attn_processor`` it patches the new processors; idempotent
    otherwise (patched processors are kept as they are). Raises ``TypeError`` for another model,
    or when none of its attention processors applies diffusers' rotation (custom processors: set
    diffusers' default processor first).
    """
    _patch(_unwrap(transformer))
    return transformer


def unpatch_rope(transformer: M) -> M:
    """Undo ``patch_rope``: every module whose processor is a patched one gets back the processor
    object that one replaced. Any other processor (one never patched, or set after patching, e.g.
    by ``set_attn_processor``) is left in place; a no-op for a model with no patched processor.
    Returns ``transformer``."""
    model = _unwrap(transformer)
    _restore([(m, p) for m, p in _processors(model) if _is_ours(p)])
    return transformer


@contextlib.contextmanager
def rope_matrix_enabled(transformer: M) -> Iterator[M]:
    """``with rope_matrix_enabled(model): ...`` patches for the block and afterwards restores the
    processors the blocks patched (processors patched before any block stay patched; a processor
    set during the block stays). Blocks on one model may nest or overlap: a processor a block
    patched is restored when the last active block that found it patched exits."""
    model = _unwrap(transformer)
    done = _patch(model)
    # This block holds what it patched and the processors other active blocks patched.
    held = done + [(m, p) for m, p in _processors(model) if (id(m), id(p)) in _block_holds]
    for module, proc in held:
        entry = _block_holds.setdefault((id(module), id(proc)), [module, proc, 0])
        entry[2] += 1
    try:
        yield transformer
    finally:
        last = []
        for module, proc in held:
            key = (id(module), id(proc))
            entry = _block_holds[key]
            entry[2] -= 1
            if entry[2] == 0:
                del _block_holds[key]
                last.append((module, proc))
        _restore(last)
