"""Switch a loaded diffusers transformer to ``rope_matrix`` and back, without editing diffusers.

    from npu_ops_transformer_ext.diffusers_patch import patch_rope, unpatch_rope, rope_matrix_enabled

    patch_rope(pipe.transformer)          # Wan, FLUX, HunyuanVideo or Qwen-Image
    ...                                   # every attention now rotates q/k with rope_matrix
    unpatch_rope(pipe.transformer)        # back to diffusers' own code

    with rope_matrix_enabled(pipe.transformer):
        pipe(...)

How each model is switched (diffusers' attention processors are left as they are):

* FLUX (``FluxTransformer2DModel``): the module-level ``apply_rotary_emb`` of
  ``transformer_flux`` is replaced by ``models.apply_rotary_emb`` (same arguments).
* HunyuanVideo (``HunyuanVideoTransformer3DModel``): its processor imports ``apply_rotary_emb``
  from ``diffusers.models.embeddings`` at call time; that attribute is replaced.
* Qwen-Image (``QwenImageTransformer2DModel``): ``apply_rotary_emb_qwen`` of
  ``transformer_qwenimage`` is replaced by ``models.apply_rotary_emb_qwen``.
* Wan (``WanTransformer3DModel`` and other models built from ``WanAttention``): Wan's processor
  defines its rotation inside ``__call__``, so there is nothing to replace. Instead each
  ``WanAttention`` gets a forward pre-hook that takes ``rotary_emb`` out of the call (the
  processor then skips its own rotation) and forward hooks on ``norm_q``/``norm_k`` that rotate
  their outputs with ``rope_matrix``: the processor applies RoPE right after these norms, so
  the attention sees the same q/k. Hooks leave ``state_dict`` unchanged.

Module-level replacements are process-wide while at least one model of that family is patched
(reference-counted); ``unpatch_rope`` restores the originals when the last one is unpatched.
"""

from __future__ import annotations

import contextlib
import importlib
import weakref

from . import models

__all__ = ["SUPPORTED", "is_patched", "patch_rope", "rope_matrix_enabled", "unpatch_rope"]

# family -> [(module path, attribute, replacement)]
_GLOBAL_PATCHES = {
    "flux": [
        (
            "diffusers.models.transformers.transformer_flux",
            "apply_rotary_emb",
            models.apply_rotary_emb,
        )
    ],
    "hunyuan_video": [("diffusers.models.embeddings", "apply_rotary_emb", models.apply_rotary_emb)],
    "qwen_image": [
        (
            "diffusers.models.transformers.transformer_qwenimage",
            "apply_rotary_emb_qwen",
            models.apply_rotary_emb_qwen,
        )
    ],
}
_CLASS_FAMILY = {
    "FluxTransformer2DModel": "flux",
    "HunyuanVideoTransformer3DModel": "hunyuan_video",
    "QwenImageTransformer2DModel": "qwen_image",
    "WanTransformer3DModel": "wan",
}
SUPPORTED = tuple(_CLASS_FAMILY)

_originals: dict = {}  # (module, attr) -> original
_refcount: dict = {}  # family -> number of patched models
_ATTR = "_rope_matrix_patch"


def _family(transformer) -> str:
    for cls in type(transformer).__mro__:
        fam = _CLASS_FAMILY.get(cls.__name__)
        if fam:
            return fam
    if any(type(m).__name__ == "WanAttention" for m in transformer.modules()):
        return "wan"
    raise TypeError(
        f"patch_rope: unsupported model {type(transformer).__name__}; supported: {', '.join(SUPPORTED)}"
    )


def _apply_global(family):
    for mod_name, attr, repl in _GLOBAL_PATCHES[family]:
        mod = importlib.import_module(mod_name)
        key = (mod_name, attr)
        if key not in _originals:
            _originals[key] = getattr(mod, attr)
        setattr(mod, attr, repl)


def _restore_global(family):
    for mod_name, attr, _ in _GLOBAL_PATCHES[family]:
        still_used = any(
            _refcount.get(f, 0) > 0
            and any((m, a) == (mod_name, attr) for m, a, _ in _GLOBAL_PATCHES[f])
            for f in _GLOBAL_PATCHES
        )
        if not still_used and (mod_name, attr) in _originals:
            setattr(importlib.import_module(mod_name), attr, _originals.pop((mod_name, attr)))


# ---- Wan: hooks ---------------------------------------------------------------------------------


def _wan_hooks(attn):
    slot = {"tables": None}
    attn_ref = weakref.ref(attn)

    def pre_hook(module, args, kwargs):
        rotary = kwargs.pop("rotary_emb", None)
        if rotary is None and len(args) > 3:
            rotary, args = args[3], args[:3] + (None,) + args[4:]
        slot["tables"] = rotary
        return args, kwargs

    def post_hook(module, args, output):
        slot["tables"] = None
        return output

    def rotate(module, args, out):
        tabs = slot["tables"]
        if tabs is None:
            return out
        cos, sin = tabs
        heads = attn_ref().heads
        x = out.unflatten(-1, (heads, -1))  # [B, S, H, D]; tables [1, S, 1, D]
        return models.apply_rotary_emb(x, (cos[0, :, 0], sin[0, :, 0]), sequence_dim=1).flatten(-2)

    if getattr(attn, "norm_q", None) is None or getattr(attn, "norm_k", None) is None:
        raise TypeError(
            "patch_rope: this WanAttention has no norm_q/norm_k to attach the rotation to"
        )
    return [
        attn.register_forward_pre_hook(pre_hook, with_kwargs=True),
        attn.register_forward_hook(post_hook),
        attn.norm_q.register_forward_hook(rotate),
        attn.norm_k.register_forward_hook(rotate),
    ]


# ---- public -------------------------------------------------------------------------------------


def is_patched(transformer) -> bool:
    return getattr(transformer, _ATTR, None) is not None


def patch_rope(transformer):
    """Make ``transformer`` (a diffusers Wan/FLUX/HunyuanVideo/Qwen-Image model) rotate q/k with
    ``rope_matrix``. Idempotent; returns the transformer."""
    if is_patched(transformer):
        return transformer
    family = _family(transformer)
    handles = []
    if family == "wan":
        for m in transformer.modules():
            if type(m).__name__ == "WanAttention":
                handles += _wan_hooks(m)
    else:
        _apply_global(family)
    _refcount[family] = _refcount.get(family, 0) + 1
    object.__setattr__(transformer, _ATTR, (family, handles))
    return transformer


def unpatch_rope(transformer):
    """Undo ``patch_rope``; a no-op for a model that is not patched. Returns the transformer."""
    state = getattr(transformer, _ATTR, None)
    if state is None:
        return transformer
    family, handles = state
    for h in handles:
        h.remove()
    _refcount[family] -= 1
    if family in _GLOBAL_PATCHES:
        _restore_global(family)
    object.__setattr__(transformer, _ATTR, None)
    return transformer


@contextlib.contextmanager
def rope_matrix_enabled(transformer):
    """``with rope_matrix_enabled(model): ...`` patches for the block and restores afterwards."""
    was = is_patched(transformer)
    patch_rope(transformer)
    try:
        yield transformer
    finally:
        if not was:
            unpatch_rope(transformer)
