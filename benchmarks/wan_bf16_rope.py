"""Wan in bf16: how far the rotation of q/k is from exact RoPE, for diffusers' own code and for
``patch_rope``, with the tables diffusers hands the attention in float32 (as it builds them) and in
bf16 (after ``model.to(torch.bfloat16)``).

    python benchmarks/wan_bf16_rope.py [--frames 21 --height 60 --width 104]

diffusers computes Wan's angles in float64, rounds cos/sin to float32 and registers them as
buffers, so ``model.to(torch.bfloat16)`` rounds the tables to bf16. The reference here is the
exact rotation (the same angles, float64 cos/sin and math, as Wan's original code) rounded once to
bf16; the figures are the largest absolute error (q is standard normal, so |q| < 5 and a bf16 ulp
is at most 2**-5), the mean absolute error and the fraction of elements that differ from the
reference.
"""

from __future__ import annotations

import argparse
import copy

import torch

MAX_POSITIONS = 1024  # max_seq_len of the WanRotaryPosEmbed built below: positions per axis


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python benchmarks/wan_bf16_rope.py", description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=21, help="latent frames (default 21: 81 video frames)")
    ap.add_argument("--height", type=int, default=60, help="latent height (default 60: 480 px)")
    ap.add_argument("--width", type=int, default=104, help="latent width (default 104: 832 px)")
    ap.add_argument("--heads", type=int, default=4, help="heads of q (default 4)")
    a = ap.parse_args(argv)
    for name in ("frames", "height", "width"):  # the rope module's tables hold 1024 positions per axis
        if not 1 <= getattr(a, name) <= MAX_POSITIONS:
            ap.error(f"--{name} must be from 1 to {MAX_POSITIONS} (the rope module's max_seq_len), got {getattr(a, name)}")
    if a.heads < 1:
        ap.error(f"--heads must be >= 1, got {a.heads}")

    import diffusers
    import npu_ops_transformer_ext  # noqa: F401
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor
    from npu_ops_transformer_ext import diffusers_patch as dp

    rope = diffusers.models.transformers.transformer_wan.WanRotaryPosEmbed(
        attention_head_dim=128, patch_size=(1, 2, 2), max_seq_len=MAX_POSITIONS
    )
    latents = torch.zeros(1, 16, a.frames, 2 * a.height, 2 * a.width)
    cos32, sin32 = rope(latents)  # float32 (diffusers' buffers), [1, S, 1, 128]
    cos16, sin16 = copy.deepcopy(rope).to(torch.bfloat16)(latents.bfloat16())  # model.to(bf16)
    # The same angles with float64 cos/sin: diffusers' formula for the buffers without its final
    # rounding to float32 (t, h, w parts of the head dim, each pair's angle repeated).
    parts = [rope.t_dim, rope.h_dim, rope.w_dim]
    ang = torch.cat(
        [
            torch.outer(
                torch.arange(rope.max_seq_len, dtype=torch.float64),
                1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64)[: d // 2] / d),
            ).repeat_interleave(2, dim=1)
            for d in parts
        ],
        dim=1,
    )
    assert torch.equal(ang.cos().float(), rope.freqs_cos) and torch.equal(ang.sin().float(), rope.freqs_sin)
    rope.freqs_cos, rope.freqs_sin = ang.cos(), ang.sin()
    cos64, sin64 = rope(latents)  # float64
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
    print(f"{'rotation':<44}{'max |err|':>10}{'mean |err|':>12}{'differ':>9}{'elements':>10}")
    rows = [
        ("diffusers, bf16 buffers (model.to(bf16))", diffusers_rot(q, cos16, sin16)),
        ("patch_rope, bf16 buffers (model.to(bf16))", patched_rot(q, cos16, sin16)),
        ("diffusers, float32 buffers (as built)", diffusers_rot(q, cos32, sin32)),
        ("patch_rope, float32 buffers (as built)", patched_rot(q, cos32, sin32)),
        ("diffusers, float64 tables", diffusers_rot(q, cos64, sin64)),
        ("patch_rope, float64 tables", patched_rot(q, cos64, sin64)),
    ]
    for name, out in rows:
        err = (out.double() - exact.double()).abs()
        n = int((out != exact).sum())
        print(f"{name:<44}{err.max().item():>10.3g}{err.mean().item():>12.3g}{n / out.numel():>9.2%}{n:>10}")


if __name__ == "__main__":
    main()
