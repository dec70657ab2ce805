"""Model drop-ins against each model's RoPE written here from its published formula, and (when the
optional ``diffusers`` package is installed) against diffusers itself on tiny random models."""

import importlib.util

import pytest
import torch
from npu_ops_transformer_ext import _per_sample, matrices, models, tables

F64 = torch.float64
HAS_DIFFUSERS = importlib.util.find_spec("diffusers") is not None
needs_diffusers = pytest.mark.skipif(
    not HAS_DIFFUSERS, reason="diffusers is not installed (optional)"
)


def _rot_pairs(x, cos_pairs, sin_pairs):
    """Golden, float64: adjacent pairs (a, b) -> (a cos - b sin, a sin + b cos)."""
    x = x.to(F64)
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos_pairs.to(F64), sin_pairs.to(F64)
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


# ---- Wan ---------------------------------------------------------------------------------------


def _wan_freqs(d, max_len=64, theta=10000.0):
    """Wan's table: cat over (d-4(d//6), 2(d//6), 2(d//6)) of polar(1, outer(arange, theta^-(2j/dim))), complex128."""
    out = []
    for dim in (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)):
        fr = 1.0 / torch.pow(
            torch.tensor(theta, dtype=F64), torch.arange(0, dim, 2, dtype=F64) / dim
        )
        ang = torch.outer(torch.arange(max_len, dtype=F64), fr)
        out.append(torch.polar(torch.ones_like(ang), ang))
    return torch.cat(out, dim=1)


def _wan_golden(x, grid_sizes, freqs):
    """Wan rope_apply semantics: per sample, complex128 multiply of the first f*h*w tokens, the rest
    copied, result float32."""
    n, c = x.size(2), x.size(3) // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    outs = []
    for i, (f, h, w) in enumerate(grid_sizes.tolist()):
        s = f * h * w
        xi = torch.view_as_complex(x[i, :s].to(F64).reshape(s, n, -1, 2))
        fi = torch.cat(
            [
                parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1),
            ],
            dim=-1,
        ).reshape(s, 1, -1)
        xi = torch.view_as_real(xi * fi).flatten(2)
        outs.append(torch.cat([xi, x[i, s:].to(F64)]))
    return torch.stack(outs).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_wan_rope_apply_per_sample_grids_and_padding(dtype):
    torch.manual_seed(0)
    d = 48
    freqs = _wan_freqs(d)
    grids = torch.tensor([[2, 3, 4], [1, 3, 4]])
    x = torch.randn(2, 30, 3, d).to(dtype)  # L = 30 > 24, 12 tokens: padding
    out = models.wan_rope_apply(x, grids, freqs)
    want = _wan_golden(x, grids, freqs)
    assert out.dtype == torch.float32 and out.shape == x.shape
    torch.testing.assert_close(out, want, rtol=0, atol=3e-6 * x.float().abs().max().item())
    assert torch.equal(out[0, 24:], x[0, 24:].float())  # padding bit-identical
    assert torch.equal(out[1, 12:], x[1, 12:].float())
    # out_dtype=None keeps x's dtype: the fp32 result rounded once
    same = models.wan_rope_apply(x, grids, freqs, out_dtype=None)
    assert same.dtype == dtype
    # one rounding of the output, plus (fp32) the fp32 products' rounding, which cancellation in
    # x*cos + rot(x)*sin leaves at the size of the inputs, not of the result
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(same.float(), want, rtol=eps, atol=4 * eps * x.float().abs().max().item())
    # ... bit for bit also for -0 and for padding tokens whose pair partner is Inf or NaN, which
    # the identity tables alone would turn into +0 and NaN.
    x[0, 25, 0, :6] = torch.tensor([-0.0, float("inf"), 5.0, -0.0, float("nan"), -0.0])
    x[1, 12:, 1] = -0.0
    for out_dtype in (torch.float32, None):
        out = models.wan_rope_apply(x, grids, freqs, out_dtype=out_dtype)
        for i, n in ((0, 24), (1, 12)):
            pad, want_pad = out[i, n:], x[i, n:].to(out.dtype)
            assert torch.equal(pad.view(torch.int16 if out.dtype == torch.bfloat16 else torch.int32),
                               want_pad.view(torch.int16 if out.dtype == torch.bfloat16 else torch.int32))


def test_wan_rope_apply_sequence_parallel_shards():
    d, sp = 24, 4
    freqs = _wan_freqs(d)
    grids = torch.tensor([[2, 2, 3]])  # 12 tokens, padded to 16 = 4 ranks x 4
    x = torch.randn(1, 16, 2, d)
    full = models.wan_rope_apply(x, grids, freqs)
    shards = [
        models.wan_rope_apply(x[:, r * 4 : (r + 1) * 4], grids, freqs, sp_rank=r, sp_size=sp)
        for r in range(sp)
    ]
    assert torch.equal(torch.cat(shards, dim=1), full)
    # The padding tokens (12..15, all on rank 3) are copied through, -0 included.
    x[:, 12:] = -0.0
    last = models.wan_rope_apply(x[:, 12:], grids, freqs, sp_rank=3, sp_size=sp)
    assert torch.equal(last.view(torch.int32), x[:, 12:].view(torch.int32))


def test_wan_rope_apply_gradient_of_freqs():
    """A freqs that requires grad gets the gradient of Wan's complex product (the tables are then
    built per call, not cached), for samples with different grids and padding."""
    d = 24
    grids = torch.tensor([[1, 2, 2], [2, 1, 2]])
    x = torch.randn(2, 6, 2, d, dtype=F64).float()
    g = torch.randn(2, 6, 2, d)
    freqs = _wan_freqs(d).requires_grad_()
    models.wan_rope_apply(x.requires_grad_(), grids, freqs).backward(g)
    got, got_x = freqs.grad.clone(), x.grad.clone()
    freqs.grad, x.grad = None, None
    _wan_golden(x, grids, freqs).backward(g)
    assert got.abs().max() > 0
    torch.testing.assert_close(got, freqs.grad, rtol=0, atol=1e-5 * freqs.grad.abs().max().item())
    torch.testing.assert_close(got_x, x.grad, rtol=0, atol=1e-6)
    # no grad mode: cached tables, no graph
    with torch.no_grad():
        a = models.wan_rope_tables(grids, freqs, 6)
        assert models.wan_rope_tables(grids, freqs, 6) is a and not a[0].requires_grad


def test_wan_tables_cache_follows_freqs():
    freqs = _wan_freqs(24)
    a = models.wan_rope_tables([[1, 2, 2]], freqs, 4)
    assert models.wan_rope_tables([[1, 2, 2]], freqs, 4) is a
    freqs.mul_(1)  # same contents: still a hit
    assert models.wan_rope_tables([[1, 2, 2]], freqs, 4) is a
    # Changes the version counter does not see (.data, a NumPy view) must still rebuild the tables.
    for change in (lambda f: f.data.mul_(2), lambda f: f.numpy().__imul__(0.5)):
        before = models.wan_rope_tables([[1, 2, 2]], freqs, 4)
        version = freqs._version
        change(freqs)
        assert freqs._version == version
        after = models.wan_rope_tables([[1, 2, 2]], freqs, 4)
        assert after is not before
        assert torch.equal(after[0], models.wan_rope_tables([[1, 2, 2]], freqs.clone(), 4)[0])
    # A sign flip of a zero is a change too (sin(-0) = -0): the cache compares bits, not values.
    zeros = torch.zeros_like(freqs)
    a = models.wan_rope_tables([[1, 2, 2]], zeros, 4)
    b = models.wan_rope_tables([[1, 2, 2]], torch.complex(-zeros.real, -zeros.imag), 4)
    assert b is not a
    for table_a, table_b in zip(a, b):  # cos and sin: +0 from +0 freqs, -0 from -0 freqs
        assert torch.equal(table_a.view(torch.int32), torch.zeros_like(table_a).view(torch.int32))
        assert torch.equal(table_b.view(torch.int32), torch.full_like(table_b, -0.0).view(torch.int32))
    # ... and so does rope_apply with them.
    x = torch.randn(1, 4, 2, 24)
    a = models.wan_rope_apply(x, [[1, 2, 2]], freqs)
    freqs.data.copy_(_wan_freqs(24, theta=500.0))
    torch.testing.assert_close(models.wan_rope_apply(x, [[1, 2, 2]], freqs),
                               _wan_golden(x, torch.tensor([[1, 2, 2]]), freqs), rtol=0, atol=1e-5)
    assert not torch.equal(models.wan_rope_apply(x, [[1, 2, 2]], freqs), a)


# ---- HunyuanVideo / FLUX / diffusers functions ----------------------------------------------


def _rope3d(s_grid=(2, 3, 4), split=(16, 56, 56), theta=256.0, dtype=torch.float32):
    t = tables.rope_nd(s_grid, split, theta=theta, freqs_dtype=dtype)
    return t.cos, t.sin


@pytest.mark.parametrize("head_first", [False, True])
@pytest.mark.parametrize("dtype,k_dtype", [(torch.float32,) * 2, (torch.bfloat16,) * 2, (torch.bfloat16, torch.float32)])
def test_hunyuan_apply_rotary_emb(head_first, dtype, k_dtype):
    cos, sin = _rope3d()
    s = cos.shape[0]
    shape_q, shape_k = (
        ((1, 4, s, 128), (1, 2, s, 128)) if head_first else ((1, s, 4, 128), (1, s, 2, 128))
    )
    xq, xk = torch.randn(shape_q).to(dtype), torch.randn(shape_k).to(k_dtype)
    oq, ok = models.hunyuan_apply_rotary_emb(xq, xk, (cos, sin), head_first=head_first)
    bc = (lambda t: t) if head_first else (lambda t: t[:, None])
    for o, x in ((oq, xq), (ok, xk)):
        want = _rot_pairs(x, bc(cos[:, 0::2]), bc(sin[:, 0::2]))
        assert o.dtype == x.dtype  # each output in its input's dtype, as HunyuanVideo's
        torch.testing.assert_close(
            o.double(), want, rtol=torch.finfo(x.dtype).eps, atol=torch.finfo(x.dtype).eps * 4
        )
    # the complex form of the same tables gives the same result
    cplx = torch.polar(torch.ones_like(cos[:, 0::2]), torch.atan2(sin[:, 0::2], cos[:, 0::2]))
    oq2, _ = models.hunyuan_apply_rotary_emb(xq, xk, cplx, head_first=head_first)
    torch.testing.assert_close(oq2, oq)
    with pytest.raises(ValueError, match="freqs must be"):
        models.hunyuan_apply_rotary_emb(xq, xk, (cos[:-1], sin[:-1]), head_first=head_first)


@pytest.mark.parametrize("k_dtype", [torch.bfloat16, torch.float32])
def test_flux_apply_rope_2x2_form(k_dtype):
    b, h, L = 2, 3, 10
    ids = torch.randint(0, 5, (b, L, 3)).double()
    ang = torch.cat(
        [
            ids[..., a : a + 1] * (10000.0 ** (-torch.arange(0, d, 2, dtype=F64) / d))
            for a, d in enumerate(tables.FLUX_SPLIT)
        ],
        -1,
    )  # [B, L, 64]
    rot = (
        torch.stack([ang.cos(), -ang.sin(), ang.sin(), ang.cos()], -1)
        .view(b, 1, L, 64, 2, 2)
        .float()
    )
    xq, xk = (
        torch.randn(b, h, L, 128, dtype=torch.bfloat16),
        torch.randn(b, 1, L, 128, dtype=k_dtype),  # FLUX returns each output in its input's dtype
    )
    oq, ok = models.flux_apply_rope(xq, xk, rot)
    for o, x in ((oq, xq), (ok, xk)):
        xp = x.float().reshape(*x.shape[:-1], -1, 1, 2)
        want = (rot[..., 0] * xp[..., 0] + rot[..., 1] * xp[..., 1]).reshape(x.shape).type_as(x)
        torch.testing.assert_close(o, want, rtol=0, atol=0)


@pytest.mark.parametrize("sequence_dim", [1, 2])
@pytest.mark.parametrize("unbind", [-1, -2])
def test_apply_rotary_emb_real(sequence_dim, unbind):
    s, d = 11, 32
    mode = "interleave" if unbind == -1 else "half"
    t = tables.rope_1d(s, d, mode=mode, dtype=F64)  # diffusers may hand float64 tables
    x = torch.randn((2, 3, s, d) if sequence_dim == 2 else (2, s, 3, d), dtype=torch.bfloat16)
    out = models.apply_rotary_emb(
        x, (t.cos, t.sin), use_real_unbind_dim=unbind, sequence_dim=sequence_dim
    )
    # golden: rotate x's pairs (adjacent or halves) in float64
    c = t.cos if sequence_dim == 2 else t.cos[:, None]
    sn = t.sin if sequence_dim == 2 else t.sin[:, None]
    xf = x.double()
    if unbind == -1:
        rot = torch.stack([-xf[..., 1::2], xf[..., 0::2]], -1).flatten(-2)
    else:
        rot = torch.cat([-xf[..., d // 2 :], xf[..., : d // 2]], -1)
    want = xf * c + rot * sn
    torch.testing.assert_close(out.double(), want, rtol=2**-8, atol=2**-8)
    with pytest.raises(ValueError):
        models.apply_rotary_emb(x, (t.cos, t.sin), sequence_dim=3)


def test_apply_rotary_emb_complex_and_qwen():
    b, s, h, d = 2, 7, 3, 16
    ang = torch.randn(s, d // 2)
    freqs = torch.polar(torch.ones_like(ang), ang)  # complex64, as Qwen-Image builds it
    x = torch.randn(b, s, h, d)
    want = torch.view_as_real(
        torch.view_as_complex(x.double().reshape(b, s, h, -1, 2))
        * freqs.to(torch.complex128)[:, None]
    ).flatten(3)
    out = models.apply_rotary_emb_qwen(x, freqs, use_real=False)
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    out2 = models.apply_rotary_emb(x, freqs[None].expand(b, s, d // 2), use_real=False)
    torch.testing.assert_close(out2, out)


# ---- against diffusers itself ------------------------------------------------------------------


@needs_diffusers
@pytest.mark.parametrize("unbind", [-1, -2])
@pytest.mark.parametrize("sequence_dim", [1, 2])
def test_apply_rotary_emb_equals_diffusers(unbind, sequence_dim):
    from diffusers.models.embeddings import apply_rotary_emb as ref

    s, d = 9, 64
    mode = "interleave" if unbind == -1 else "half"
    t = tables.rope_1d(s, d, mode=mode)
    x = torch.randn((1, 2, s, d) if sequence_dim == 2 else (1, s, 2, d), dtype=torch.bfloat16)
    got = models.apply_rotary_emb(x, (t.cos, t.sin), True, unbind, sequence_dim)
    want = ref(x, (t.cos, t.sin), True, unbind, sequence_dim)
    assert torch.equal(got, want)  # same fp32 products, one rounding: bit for bit


def _count_calls(monkeypatch):
    calls = []
    for name in ("rope_matrix", "rope_matrix_qk"):
        fn = getattr(_per_sample, name)  # where the drop-ins' calls of the ops are

        def wrap(*a, _fn=fn, _n=name):
            calls.append(_n)
            return _fn(*a)

        monkeypatch.setattr(_per_sample, name, wrap)
    return calls


def _tiny(family):
    import diffusers

    g = torch.Generator().manual_seed(0)
    if family == "flux":
        m = diffusers.FluxTransformer2DModel(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=8,
            pooled_projection_dim=8,
            axes_dims_rope=(4, 6, 6),
        )
        h, w, txt = 3, 4, 5
        img_ids = torch.zeros(h * w, 3)
        img_ids[:, 1] = torch.arange(h).repeat_interleave(w).float()
        img_ids[:, 2] = torch.arange(w).repeat(h).float()
        kw = {
            "hidden_states": torch.randn(1, h * w, 4, generator=g),
            "encoder_hidden_states": torch.randn(1, txt, 8, generator=g),
            "pooled_projections": torch.randn(1, 8, generator=g),
            "timestep": torch.tensor([0.5]),
            "img_ids": img_ids,
            "txt_ids": torch.zeros(txt, 3),
        }
    elif family == "wan":
        m = diffusers.WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=4,
            out_channels=4,
            text_dim=8,
            freq_dim=8,
            ffn_dim=16,
            num_layers=1,
            rope_max_seq_len=32,
        )
        kw = {
            "hidden_states": torch.randn(1, 4, 2, 4, 6, generator=g),
            "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 3, 8, generator=g),
        }
    elif family == "hunyuan_video":
        m = diffusers.HunyuanVideoTransformer3DModel(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=12,
            num_layers=1,
            num_single_layers=1,
            num_refiner_layers=1,
            patch_size=1,
            patch_size_t=1,
            text_embed_dim=8,
            pooled_projection_dim=8,
            rope_axes_dim=(4, 4, 4),
        )
        kw = {
            "hidden_states": torch.randn(1, 4, 2, 3, 4, generator=g),
            "timestep": torch.tensor([500]),
            "encoder_hidden_states": torch.randn(1, 3, 8, generator=g),
            "encoder_attention_mask": torch.ones(1, 3),
            "pooled_projections": torch.randn(1, 8, generator=g),
            "guidance": torch.tensor([1000.0]),
        }
    else:
        m = diffusers.QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=16,
            out_channels=4,
            num_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=8,
            axes_dims_rope=(4, 6, 6),
        )
        kw = {
            "hidden_states": torch.randn(1, 6, 16, generator=g),
            "encoder_hidden_states": torch.randn(1, 5, 8, generator=g),
            "encoder_hidden_states_mask": torch.ones(1, 5, dtype=torch.long),
            "timestep": torch.tensor([0.5]),
            "img_shapes": [(1, 2, 3)],
        }
    return m.eval(), kw


@needs_diffusers
@pytest.mark.parametrize("family", ["flux", "wan", "hunyuan_video", "qwen_image"])
def test_patch_diffusers_transformer(family, monkeypatch):
    from npu_ops_transformer_ext import diffusers_patch as dp

    torch.manual_seed(0)
    model, kw = _tiny(family)
    with torch.no_grad():
        want = model(**kw, return_dict=False)[0]
        calls = _count_calls(monkeypatch)
        sd = set(model.state_dict())
        dp.patch_rope(model)
        assert dp.is_patched(model) and set(model.state_dict()) == sd
        got = model(**kw, return_dict=False)[0]
        assert calls, "the patched model did not call rope_matrix"
        n = len(calls)
        dp.unpatch_rope(model)
        back = model(**kw, return_dict=False)[0]
        assert len(calls) == n, "the unpatched model still calls rope_matrix"
        with dp.rope_matrix_enabled(model):
            again = model(**kw, return_dict=False)[0]
        assert not dp.is_patched(model)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(back, want)
    assert torch.equal(again, got)


def test_wan_tables_cached_in_inference_mode_serve_training(monkeypatch):
    # empty caches, so that inference mode builds what the training call then finds
    monkeypatch.setattr(matrices, "_CACHED", {})
    monkeypatch.setattr(models, "_WAN_CACHE", type(models._WAN_CACHE)())
    freqs = _wan_freqs(24)
    x = torch.randn(1, 4, 2, 24)
    with torch.inference_mode():
        want = models.wan_rope_apply(x, [[1, 2, 2]], freqs)
    xx = x.clone().requires_grad_()
    out = models.wan_rope_apply(xx, [[1, 2, 2]], freqs)
    out.sum().backward()
    assert torch.equal(out.detach(), want) and xx.grad is not None


def test_drop_in_errors_name_the_argument_the_caller_got_wrong():
    x = torch.randn(2, 30, 4, 64)
    with pytest.raises(ValueError, match=r"grid_sizes must give one \(f, h, w\) per sample .* got 3 grids for a batch of 2"):
        models.wan_rope_apply(x, torch.tensor([[2, 3, 4], [1, 3, 5], [1, 1, 1]]), _wan_freqs(64))
    with pytest.raises(ValueError, match=r"freqs must be \[max_len, D/2\] = \[max_len, 32\] for x's D = 64, got \[64, 64\]"):
        models.wan_rope_apply(x, [[2, 3, 4]], _wan_freqs(128))
    with pytest.raises(ValueError, match=r"grid \(1, 1, 200\) needs positions 0 \.\. 199 .* freqs \[64, 32\] has 64"):
        models.wan_rope_apply(torch.randn(1, 200, 2, 64), [[1, 1, 200]], _wan_freqs(64))
    with pytest.raises(ValueError, match=r"grid sizes \(f, h, w\) must be >= 0, got \(1, -1, 2\)"):
        models.wan_rope_tables([[1, -1, 2]], _wan_freqs(64), 30)
    with pytest.raises(ValueError, match=r"wan_rope_tables: freqs must be \[max_len, D/2\], got \[64\]"):
        models.wan_rope_tables([[1, 1, 2]], _wan_freqs(64)[:, 0], 30)
    # one grid for every sample stays accepted
    assert models.wan_rope_apply(x, [[2, 3, 4]], _wan_freqs(64)).shape == x.shape
    q = torch.randn(1, 2, 8, 128)
    with pytest.raises(ValueError, match=r"freqs_cis must be \[B, 1, L, D/2, 2, 2\] with D/2 = 64 \(xq's D = 128\), got \[1, 1, 8, 32, 2, 2\]"):
        models.flux_apply_rope(q, q, torch.randn(1, 1, 8, 32, 2, 2))
    with pytest.raises(ValueError, match=r"k must have q's rank 4 \(q \[2, 4, 8, 64\]\), got k \[2, 8, 64\] of rank 3"):
        tables.RotaryEmbedding(64, layout="BNSD")(torch.randn(2, 4, 8, 64), torch.randn(2, 8, 64))
