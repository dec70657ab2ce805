"""Wan in bf16: how far the rotation of q/k is from exact RoPE, for diffusers' own code and for
``patch_rope``, when the model (and so diffusers' RoPE buffers) is cast to bf16.

    python benchmarks/wan_bf16_rope.py [--frames 21 --height 60 --width 104]

diffusers builds Wan's cos/sin tables in float64 and registers them as buffers, so
``model.to(torch.bfloat16)`` rounds the tables to bf16. The reference here is the exact rotation
(float64 tables and math, as Wan's original code) rounded once to bf16; the figures are the largest
absolute error (q is standard normal, so |q| < 5 and a bf16 ulp is at most 2**-5), the mean
absolute error and the fraction of elements that differ from the reference.
"""

from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python benchmarks/wan_bf16_rope.py", description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=21, help="latent frames (default 21: 81 video frames)")
    ap.add_argument("--height", type=int, default=60, help="latent height (default 60: 480 px)")
    ap.add_argument("--width", type=int, default=104, help="latent width (default 104: 832 px)")
    ap.add_argument("--heads", type=int, default=4, help="heads of q (default 4)")
    a = ap.parse_args(argv)

    import diffusers
    import npu_ops_transformer_ext  # noqa: F401
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor
    from npu_ops_transformer_ext import diffusers_patch as dp

    rope = diffusers.models.transformers.transformer_wan.WanRotaryPosEmbed(
        attention_head_dim=128, patch_size=(1, 2, 2), max_seq_len=1024
    )
    latents = torch.zeros(1, 16, a.frames, 2 * a.height, 2 * a.width)
    cos64, sin64 = rope(latents)  # float64, [1, S, 1, 128]
    cos16, sin16 = rope.to(torch.bfloat16)(latents.bfloat16())
    s = cos64.shape[1]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, s, a.heads, 128, generator=g).bfloat16()

    def rotate(x, cos, sin):  # exact interleave rotation in x's precision of the given tables
        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
        c, sn = cos[..., 0::2], sin[..., 1::2]
        return torch.stack([x1 * c - x2 * sn, x1 * sn + x2 * c], -1).flatten(-2)

    exact = rotate(q.double(), cos64, sin64).bfloat16()
    # diffusers' own processor and the patched one, called the way WanAttention calls them
    proc = WanAttnProcessor()
    call = type(proc).__call__
    consts = [c for c in call.__code__.co_consts if getattr(c, "co_name", "") == "apply_rotary_emb"]
    import types

    diffusers_rot = types.FunctionType(consts[0], call.__globals__)
    patched_cls = dp._patched_class(WanAttnProcessor, "wan")
    patched_consts = [
        c for c in patched_cls.__call__.__code__.co_consts if getattr(c, "co_name", "") == "apply_rotary_emb"
    ]
    patched_rot = types.FunctionType(patched_consts[0], patched_cls.__call__.__globals__)
    print(f"Wan q [1, {s}, {a.heads}, 128] standard normal, bf16 (latent {a.frames}x{a.height}x{a.width}); "
          "reference: float64 tables and math, rounded once to bf16")
    print(f"{'rotation':<44}{'max |err|':>10}{'mean |err|':>12}{'differ':>9}")
    rows = [
        ("diffusers, bf16 buffers (model.to(bf16))", diffusers_rot(q, cos16, sin16)),
        ("patch_rope, bf16 buffers (model.to(bf16))", patched_rot(q, cos16, sin16)),
        ("diffusers, float64 buffers (bf16 weights)", diffusers_rot(q, cos64, sin64)),
        ("patch_rope, float64 buffers (bf16 weights)", patched_rot(q, cos64, sin64)),
    ]
    for name, out in rows:
        err = (out.double() - exact.double()).abs()
        frac = (out != exact).double().mean().item()
        print(f"{name:<44}{err.max().item():>10.3g}{err.mean().item():>12.3g}{frac:>9.2%}")


if __name__ == "__main__":
    main()
