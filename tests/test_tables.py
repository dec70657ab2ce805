"""Table builders against each model's RoPE written here from its published formula.

Goldens are independent of the package: complex-number rotations in float64 (Wan's form), a 2x2
rotation per pair (FLUX's form), explicit per-pair loops for mRoPE and the scaling rules.
"""

import math

import npu_ops_transformer_ext as ext
import pytest
import torch
from npu_ops_transformer_ext import reference, tables

F64 = torch.float64


def _rot_complex(x, ang, mode):
    """Golden: rotate pairs of x by angles ang ([..., D/2]) as complex numbers, float64."""
    x = x.to(F64)
    d = x.shape[-1]
    if mode == "interleave":
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :])
    r = z * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([r.real, r.imag], dim=-1)


def _inv(d, theta):
    return torch.tensor([theta ** (-2.0 * j / d) for j in range(d // 2)], dtype=F64)


def _apply(x, t):
    return ext.rope_matrix(x, t.mat.to(x.dtype), t.sin.to(x.dtype), t.cos.to(x.dtype))


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rope_1d_matches_complex_rotation(mode):
    s, d = 37, 64
    x = torch.randn(2, 3, s, d, dtype=F64)
    t = tables.rope_1d(s, d, theta=500.0, offset=11, mode=mode, dtype=F64, mat_dtype=F64)
    ang = (torch.arange(s, dtype=F64) + 11)[:, None] * _inv(d, 500.0)
    torch.testing.assert_close(_apply(x, t), _rot_complex(x, ang, mode), rtol=1e-12, atol=1e-12)
    assert t.cos.dtype == torch.float32 or t.cos.dtype == F64


def test_rope_1d_partial_rotary_passes_tail_through():
    s, d, r = 9, 80, 32
    x = torch.randn(1, 2, s, d)
    t = tables.rope_1d(s, d, rotary_dim=r, mode="half")
    out = _apply(x, t)
    assert torch.equal(out[..., r:], x[..., r:])
    want = _rot_complex(x[..., :r], torch.arange(s, dtype=F64)[:, None] * _inv(r, 10000.0), "half")
    torch.testing.assert_close(out[..., :r].double(), want, rtol=1e-5, atol=1e-5)
    # Bit for bit, -0 included (the tail's sin is -0.0: x*1 + 0*(-0.0) keeps x's -0), also for a
    # tail whose rotated partners are Inf or NaN, and in bf16 and through rope_matrix_qk.
    x[..., r::3] = -0.0
    x[..., 0] = float("inf")
    x[..., 1] = float("nan")
    for dt in (torch.float32, torch.bfloat16):
        xd = x.to(dt)
        iview = torch.int32 if dt == torch.float32 else torch.int16
        for got in (_apply(xd, t), *ext.rope_matrix_qk(xd, xd, t.mat, t.sin, t.cos)):
            assert torch.equal(got[..., r:].view(iview), xd[..., r:].view(iview))


def test_rope_1d_positions_tensor_and_layouts():
    d = 32
    pos = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 10]])
    t = tables.rope_1d(pos, d, mode="interleave")
    assert t.cos.shape == (2, 4, d)
    t2 = tables.rope_1d(4, d, offset=7, mode="interleave")
    assert torch.equal(t.cos[1], t2.cos) and torch.equal(t.sin[1], t2.sin)
    x = torch.randn(2, 4, 3, d)  # BSND
    out = _apply(
        x,
        tables.RopeTables(
            tables.for_layout(t.cos, "BSND"), tables.for_layout(t.sin, "BSND"), t.mat
        ),
    )
    xb = x.transpose(1, 2)  # BNSD view
    out_b = _apply(
        xb,
        tables.RopeTables(
            tables.for_layout(t.cos, "BNSD"), tables.for_layout(t.sin, "BNSD"), t.mat
        ),
    )
    assert torch.equal(out, out_b.transpose(1, 2))


def _wan_golden(x, grid, theta=10000.0):
    """Wan: per-axis complex128 tables ``polar(1, outer(pos, 1/theta**(arange(0,d,2)/d)))`` for
    dims (d-4(d//6), 2(d//6), 2(d//6)), concatenated per token, interleaved complex multiply."""
    d = x.shape[-1]
    dims = [d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)]
    f, h, w = grid
    parts = []
    for a, (dim, n) in enumerate(zip(dims, grid)):
        fr = 1.0 / torch.pow(
            torch.tensor(theta, dtype=F64), torch.arange(0, dim, 2, dtype=F64) / dim
        )
        ang = torch.outer(torch.arange(n, dtype=F64), fr)
        shape = [1, 1, 1, dim // 2]
        shape[a] = n
        parts.append(ang.view(shape).expand(f, h, w, dim // 2))
    ang = torch.cat(parts, dim=-1).reshape(f * h * w, 1, d // 2)  # [S, 1, D/2] for BSND x
    return _rot_complex(x, ang, "interleave")


def test_rope_nd_wan_split_and_grid():
    grid, d = (3, 4, 5), 128
    assert tables.wan_split(d) == tables.WAN_SPLIT
    x = torch.randn(1, 60, 2, d, dtype=F64)
    t = tables.rope_nd(grid, tables.WAN_SPLIT, mode="interleave", dtype=F64, mat_dtype=F64)
    tab = tables.RopeTables(t.cos[:, None], t.sin[:, None], t.mat)
    torch.testing.assert_close(_apply(x, tab), _wan_golden(x, grid), rtol=1e-12, atol=1e-12)
    # float32 tables (the default) vs the float64 golden: within a few float32 ulps
    t32 = tables.rope_nd(grid, tables.WAN_SPLIT)
    out = ext.rope_matrix(x.float(), t32.mat, t32.sin[:, None], t32.cos[:, None])
    torch.testing.assert_close(
        out.double(), _wan_golden(x, grid), rtol=0, atol=4e-6 * x.abs().max().item()
    )


def test_rope_nd_hunyuan_fp32_tables_bitwise():
    """HunyuanVideo builds fp32 tables: ``1/(theta**(arange(0,d,2).float()/d))``, outer with float
    grid positions, cos/sin, repeat_interleave(2); theta 256, split 16/56/56."""
    grid = (2, 3, 4)
    t = tables.rope_nd(grid, tables.HUNYUAN_VIDEO_SPLIT, theta=256.0, freqs_dtype=torch.float32)
    mesh = torch.meshgrid(*[torch.arange(n, dtype=torch.float32) for n in grid], indexing="ij")
    cos, sin = [], []
    for a, dim in enumerate(tables.HUNYUAN_VIDEO_SPLIT):
        fr = 1.0 / (256.0 ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
        ang = torch.outer(mesh[a].reshape(-1), fr)
        cos.append(ang.cos().repeat_interleave(2, dim=1))
        sin.append(ang.sin().repeat_interleave(2, dim=1))
    assert torch.equal(t.cos, torch.cat(cos, 1)) and torch.equal(t.sin, torch.cat(sin, 1))
    assert torch.equal(t.mat, ext.get_interleave_matrix(128, dtype=torch.float32))


def test_rope_nd_flux_ids_rotation_matrix_form():
    """FLUX: ids [L, 3] (text ids 0 -> identity); per pair the 2x2 matrix [[cos, -sin], [sin, cos]]."""
    h, w, txt = 3, 4, 5
    ids = torch.zeros(txt + h * w, 3)
    ids[txt:, 1] = torch.arange(h).repeat_interleave(w).float()
    ids[txt:, 2] = torch.arange(w).repeat(h).float()
    t = tables.rope_nd(ids, tables.FLUX_SPLIT, dtype=F64, mat_dtype=F64)
    x = torch.randn(1, 2, txt + h * w, 128, dtype=F64)  # BNSD
    ang = torch.cat(
        [ids[:, a : a + 1].double() * _inv(d, 10000.0) for a, d in enumerate(tables.FLUX_SPLIT)], -1
    )
    rot = torch.stack(
        [torch.stack([ang.cos(), -ang.sin()], -1), torch.stack([ang.sin(), ang.cos()], -1)], -2
    )
    xp = x.reshape(1, 2, -1, 64, 2, 1)
    want = (rot @ xp).reshape(x.shape)
    out = _apply(x, t)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[:, :, :txt], x[:, :, :txt])


def test_grid_positions_centered_like_qwen_image():
    p = tables.grid_positions((1, 5, 4), center=(False, True, True))
    assert p[:, 1].unique().tolist() == [-3, -2, -1, 0, 1]
    assert p[:, 2].unique().tolist() == [-2, -1, 0, 1]
    assert p.shape == (20, 3)


def test_rope_nd_seed_3d_half_equals_seed_v1():
    """The seed's 3D case: 44+44+40, rotate_half inside each block, against reference.rope_v1."""
    x = torch.randn(1, 2, 24, 128)
    t = tables.rope_nd((2, 3, 4), tables.SEED_3D_SPLIT, mode="half")
    assert torch.equal(
        t.mat, reference.mode_matrix("half", tables.SEED_3D_SPLIT, dtype=torch.float32)
    )
    want = reference.rope_v1(x, t.sin, t.cos, "half", tables.SEED_3D_SPLIT)
    assert torch.equal(_apply(x, t), want)


def test_rope_mrope_sections_and_interleaved():
    d, secs, s = 32, [4, 6, 6], 7
    pos = torch.stack([torch.arange(s), torch.arange(s) * 2 + 1, torch.arange(s) * 3 + 2])
    inv = _inv(d, 10000.0)
    for interleaved in (False, True):
        t = tables.rope_mrope(pos, d, secs, mode="half", interleaved=interleaved, dtype=F64)
        for j in range(d // 2):
            if interleaved:
                a = (
                    1
                    if (j % 3 == 1 and j < 3 * secs[1])
                    else 2
                    if (j % 3 == 2 and j < 3 * secs[2])
                    else 0
                )
            else:
                a = 0 if j < secs[0] else 1 if j < secs[0] + secs[1] else 2
            want = torch.cos(pos[a].double() * inv[j])
            torch.testing.assert_close(t.cos[:, j], want, rtol=0, atol=1e-15)
            torch.testing.assert_close(t.cos[:, j + d // 2], want, rtol=0, atol=1e-15)
    # text tokens: all streams equal -> plain 1D RoPE
    same = torch.arange(s).expand(3, s)
    a = tables.rope_mrope(same, d, secs)
    b = tables.rope_1d(s, d)
    assert torch.equal(a.cos, b.cos) and torch.equal(a.sin, b.sin)


def _yarn_golden(d, theta, factor, orig, beta_fast=32, beta_slow=1):
    def corr(r):
        return (d * math.log(orig / (r * 2 * math.pi))) / (2 * math.log(theta))

    lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), d - 1)
    out = []
    for j in range(d // 2):
        base = theta ** (-2.0 * j / d)
        ramp = min(max((j - lo) / (hi - lo), 0.0), 1.0)
        out.append(base / factor * ramp + base * (1 - ramp))
    return torch.tensor(out, dtype=F64), 0.1 * math.log(factor) + 1


def _llama3_golden(d, theta, factor, low, high, orig):
    out = []
    for j in range(d // 2):
        f = theta ** (-2.0 * j / d)
        wl = 2 * math.pi / f
        if wl < orig / high:
            out.append(f)
        elif wl > orig / low:
            out.append(f / factor)
        else:
            sm = (orig / wl - low) / (high - low)
            out.append((1 - sm) * f / factor + sm * f)
    return torch.tensor(out, dtype=F64)


def test_scaling_rules():
    d, th = 128, 500000.0
    inv, attn = tables.rope_inv_freq(d, th, {"type": "linear", "factor": 4.0})
    torch.testing.assert_close(inv, _inv(d, th) / 4)
    assert attn == 1.0
    inv, _ = tables.rope_inv_freq(d, th, {"type": "ntk", "factor": 8.0})
    torch.testing.assert_close(inv, _inv(d, th * 8.0 ** (d / (d - 2))))
    dyn = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024}
    torch.testing.assert_close(tables.rope_inv_freq(d, th, dyn, seq_len=512)[0], _inv(d, th))
    torch.testing.assert_close(
        tables.rope_inv_freq(d, th, dyn, seq_len=4096)[0],
        _inv(d, th * (2.0 * 4 - 1) ** (d / (d - 2))),
    )
    y = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    inv, attn = tables.rope_inv_freq(d, th, y)
    g_inv, g_attn = _yarn_golden(d, th, 4.0, 4096)
    torch.testing.assert_close(inv, g_inv)
    assert attn == pytest.approx(g_attn)
    l3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    torch.testing.assert_close(
        tables.rope_inv_freq(d, th, l3)[0], _llama3_golden(d, th, 8.0, 1.0, 4.0, 8192)
    )
    with pytest.raises(ValueError, match="unknown scaling type"):
        tables.rope_inv_freq(d, th, {"type": "nope"})


def test_yarn_attention_factor_scales_tables_not_tail():
    y = {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "attention_factor": 1.5,
    }
    t = tables.rope_1d(16, 64, rotary_dim=32, scaling=y, dtype=F64)
    torch.testing.assert_close(
        t.cos[:, :32] ** 2 + t.sin[:, :32] ** 2, torch.full((16, 32), 2.25, dtype=F64)
    )
    assert torch.equal(t.cos[:, 32:], torch.ones(16, 32, dtype=F64))


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rope_nd_attention_factor_per_axis(mode):
    """Each axis of rope_nd is its own 1D RoPE: a YaRN factor on one axis scales only that axis's
    dims (cos^2 + sin^2 = factor^2 there, 1 elsewhere), and two axes keep two factors."""
    def yarn(af):
        return {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                "attention_factor": af}

    grid = (2, 3, 4)
    t = tables.rope_nd(grid, (8, 8, 8), scaling=[yarn(1.5), None, yarn(0.5)], mode=mode, dtype=F64)
    norm = t.cos**2 + t.sin**2
    want = torch.cat([torch.full((8,), 2.25), torch.ones(8), torch.full((8,), 0.25)]).to(F64)
    torch.testing.assert_close(norm, want.expand_as(norm))
    # each axis equals rope_1d of that axis alone, scaling included
    pos = tables.grid_positions(grid)
    for a, sc in enumerate([yarn(1.5), None, yarn(0.5)]):
        one = tables.rope_1d(pos[:, a], 8, scaling=sc, mode=mode, dtype=F64)
        assert torch.equal(t.cos[:, 8 * a : 8 * a + 8], one.cos)
        assert torch.equal(t.sin[:, 8 * a : 8 * a + 8], one.sin)


def test_table_builders_refuse_bad_arguments():
    import numpy as np

    # an integral S of any integer type is S; a float or bool is refused, not taken as a position
    assert torch.equal(tables.rope_1d(np.int64(4), 8).cos, tables.rope_1d(4, 8).cos)
    for bad in (4.0, True):
        with pytest.raises(TypeError, match="positions must be an int S"):
            tables.rope_1d(bad, 8)
    with pytest.raises(ValueError, match="S must be >= 0"):
        tables.rope_1d(-1, 8)
    with pytest.raises(TypeError, match="scaling must be None or a mapping"):
        tables.rope_1d(4, 8, scaling="linear")
    with pytest.raises(ValueError, match="linear scaling needs 'factor'"):
        tables.rope_1d(4, 8, scaling={"type": "linear"})
    for theta in (0.0, -10000.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="theta .* must be a finite number > 0"):
            tables.rope_1d(4, 8, theta=theta)
    for kind in ("ntk", "dynamic"):
        with pytest.raises(ValueError, match=f"{kind} scaling needs dim > 2"):
            tables.rope_1d(4, 2, scaling={"type": kind, "factor": 2.0, "original_max_position_embeddings": 2})
    with pytest.raises(TypeError, match="must be a floating dtype, got torch.int32"):
        tables.rope_1d(4, 8, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"theta must have one entry per axis \(3"):
        tables.rope_nd((2, 2, 2), (8, 8, 8), theta=[10000.0, 256.0])
    with pytest.raises(ValueError, match=r"scaling must have one entry per axis \(3"):
        tables.rope_nd((2, 2, 2), (8, 8, 8), scaling=[None])
    with pytest.raises(TypeError, match="scaling must be a list of one mapping or None per axis"):
        tables.rope_nd((2, 2, 2), (8, 8, 8), scaling={"type": "linear", "factor": 2.0})


def test_rotary_embedding_module_caches_and_survives_dtype_cast():
    rope = tables.RotaryEmbedding(64, mode="half", layout="BSND")
    a = rope.tables(10)
    b = rope.tables(10)
    assert b.cos.data_ptr() == a.cos.data_ptr() and b.mat is a.mat  # a view of the cached table
    assert a.cos.shape == (10, 1, 64) and a.cos.dtype == torch.float32
    rope.to(torch.bfloat16)
    assert rope.tables(10).cos.dtype == torch.float32
    q = torch.randn(2, 10, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 10, 1, 64, dtype=torch.bfloat16)
    qo, ko = rope(q, k, offset=3)
    t = tables.rope_1d(10, 64, offset=3, mode="half")
    assert torch.equal(qo, ext.rope_matrix(q, t.mat, t.sin[:, None], t.cos[:, None]))
    assert torch.equal(ko, ext.rope_matrix(k, t.mat, t.sin[:, None], t.cos[:, None]))
    pos = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10, 11, 12]] * 2)
    qp, kp = rope(q, k, positions=pos)
    assert torch.equal(qp, qo) and torch.equal(kp, ko)
    assert len(rope._cache) == 1  # one table per (device, dtype), sliced


def _count_builds(monkeypatch, rope):
    n = []
    real = rope._build

    def counting(*a):
        n.append(a[0] if isinstance(a[0], int) else tuple(a[0].shape))
        return real(*a)

    monkeypatch.setattr(rope, "_build", counting)
    return n


def test_rotary_embedding_decode_does_not_rebuild_every_step(monkeypatch):
    """KV-cache decode (offset growing by one per step) slices cached tables: float64 tables are
    rebuilt O(log n) times (geometric growth), not every step, and every step's tables equal
    rope_1d's for that offset bit for bit."""
    d = 32
    rope = tables.RotaryEmbedding(d, layout="BSND")
    builds = _count_builds(monkeypatch, rope)
    q, k = torch.randn(2, 100, 4, d), torch.randn(2, 100, 2, d)
    rope(q, k)  # prefill
    q1, k1 = torch.randn(2, 1, 4, d), torch.randn(2, 1, 2, d)
    for n in range(100, 1100):
        qo, ko = rope(q1, k1, offset=n)
        if n % 97 == 0:
            t = tables.rope_1d(1, d, offset=n)
            tab = tables.RopeTables(t.cos[:, None], t.sin[:, None], t.mat)
            assert torch.equal(qo, _apply(q1, tab)) and torch.equal(ko, _apply(k1, tab))
    # the prefill's build has headroom (the first decode steps do not rebuild), then it doubles
    assert builds == [125, 250, 500, 1000, 2000], builds
    # per-token positions are rows of the same cached table
    pos = torch.tensor([[5, 6, 7], [900, 901, 902]])
    qp = torch.randn(2, 3, 4, d)
    got, _ = rope(qp, qp, positions=pos)
    t = tables.rope_1d(pos, d)
    want = _apply(qp, tables.RopeTables(t.cos[:, :, None], t.sin[:, :, None], t.mat))
    assert torch.equal(got, want)
    assert len(builds) <= 6


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64},
        {
            "rope_type": "longrope",
            "original_max_position_embeddings": 64,
            "short_factor": [1.0 + 0.01 * j for j in range(16)],
            "long_factor": [1.0 + 0.1 * j for j in range(16)],
            "factor": 4.0,
        },
    ],
    ids=["dynamic", "longrope"],
)
def test_rotary_embedding_cache_follows_length_dependent_scaling(scaling, monkeypatch):
    """Dynamic NTK and LongRoPE change the frequencies past L: cached tables never serve a
    position from the other regime."""
    d = 32
    rope = tables.RotaryEmbedding(d, layout="BNSD", scaling=scaling)
    builds = _count_builds(monkeypatch, rope)
    x = torch.randn(1, 2, 1, d, dtype=F64)
    for n in [0, 10, 40, 63, 64, 65, 100, 63, 200]:
        got = rope(x, offset=n)
        t = tables.rope_1d(1, d, offset=n, scaling=scaling, dtype=F64, mat_dtype=F64)
        want = ext.rope_matrix(x, t.mat, t.sin.float().double(), t.cos.float().double())
        assert torch.equal(got, want), n
    if scaling["rope_type"] == "longrope":
        assert builds == [1, 13, 51, 64, 81, 162, 324]  # short capped at L = 64, then long


def test_rotary_embedding_layout_is_required():
    """The layout is never guessed: no default (the old default BNSD silently rotated BSND q/k by
    their head index)."""
    with pytest.raises(TypeError, match="layout"):
        tables.RotaryEmbedding(64)
    with pytest.raises(ValueError, match="BNSD.*BSND"):
        tables.RotaryEmbedding(64, layout="bsnd")


@pytest.mark.parametrize("built, given", [("BSND", "BNSD"), ("BNSD", "BSND")])
def test_rotary_embedding_wrong_layout_raises(built, given):
    """q/k in the other layout (GQA: the head counts differ) raise an error naming both layouts
    instead of rotating each head by its head index."""
    b, s, hq, hk, d = 2, 10, 4, 2, 64
    rope = tables.RotaryEmbedding(d, layout=built)
    shape = (lambda h: (b, h, s, d)) if given == "BNSD" else (lambda h: (b, s, h, d))
    q, k = torch.randn(shape(hq)), torch.randn(shape(hk))
    with pytest.raises(ValueError, match="layout='BNSD'.*layout='BSND'"):
        rope(q, k)
    good = tables.RotaryEmbedding(d, layout=given)
    qo, _ = good(q, k)
    t = tables.rope_1d(s, d)
    want = _apply(
        q, tables.RopeTables(*(tables.for_layout(v, given) for v in (t.cos, t.sin)), t.mat)
    )
    assert torch.equal(qo, want)


def test_rotary_embedding_positions_must_match_sequence_dim():
    rope = tables.RotaryEmbedding(32, layout="BSND")
    q = torch.randn(1, 6, 3, 32)  # BSND, S = 6
    with pytest.raises(ValueError, match="positions \\[1, 3\\] has 3"):
        rope(q, positions=torch.arange(3)[None])
    with pytest.raises(ValueError, match="rank >= 3"):
        rope(torch.randn(6, 32))


# ---- HF transformers rope configs, against HF's own inverse frequencies ----------------------


def _hf_config(rope_parameters, **kw):
    T = pytest.importorskip("transformers")
    base = {
        "vocab_size": 32,
        "hidden_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 128,
        "max_position_embeddings": 4096,
    }
    base.update(kw)
    return T.LlamaConfig(rope_parameters=rope_parameters, **base)


def _hf_inv(config, seq_len=None):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)


_LONG = [1.0 + 0.05 * j for j in range(64)]
_SHORT = [1.0 + 0.01 * j for j in range(64)]

HF_ROPES = {
    "default": ({"rope_type": "default", "rope_theta": 500000.0}, {}, [None]),
    "linear": ({"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}, {}, [None]),
    # dynamic as HF writes it: no original_max_position_embeddings (HF uses max_position_embeddings)
    "dynamic": (
        {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
        {},
        [None, 100, 9000],
    ),
    "yarn": (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "rope_theta": 1e6,
        },
        {},
        [None],
    ),
    "yarn-mscale-untruncated": (
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
            "truncate": False,
            "rope_theta": 10000.0,
        },
        {"max_position_embeddings": 163840},
        [None],
    ),
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
        {"max_position_embeddings": 131072},
        [None],
    ),
    "longrope": (
        {
            "rope_type": "longrope",
            "short_factor": _SHORT,
            "long_factor": _LONG,
            "original_max_position_embeddings": 4096,
            "rope_theta": 10000.0,
        },
        {"max_position_embeddings": 131072},
        [None, 4096, 5000],
    ),
}


@pytest.mark.parametrize("name", list(HF_ROPES))
def test_hf_rope_configs_match_hf_inverse_frequencies(name):
    params, kw, seq_lens = HF_ROPES[name]
    config = _hf_config(dict(params), **kw)
    scaling = tables.hf_rope_scaling(config)
    head_dim, rotary_dim = tables.hf_rotary_dim(config)
    assert (head_dim, rotary_dim) == (128, 128)
    for seq_len in seq_lens:
        want, want_attn = _hf_inv(config, seq_len)
        inv, attn = tables.rope_inv_freq(rotary_dim, scaling=scaling, seq_len=seq_len)
        # HF computes in float32 (powers, and YaRN's ramp with fractional bounds): a few ulps
        torch.testing.assert_close(inv.float(), want, rtol=4e-6, atol=0)
        assert attn == pytest.approx(want_attn, rel=1e-12)
    # the raw dict, as HF writes it, works too when it carries what the rule needs
    if "original_max_position_embeddings" in params or params["rope_type"] in ("default", "linear"):
        inv, _ = tables.rope_inv_freq(
            rotary_dim, scaling=params, max_position_embeddings=config.max_position_embeddings
        )
        torch.testing.assert_close(inv.float(), _hf_inv(config)[0], rtol=4e-6, atol=0)


def test_hf_dynamic_without_original_needs_max_position_embeddings():
    dyn = {"rope_type": "dynamic", "factor": 2.0}
    with pytest.raises(ValueError, match="hf_rope_scaling"):
        tables.rope_inv_freq(64, scaling=dyn, seq_len=100)
    a, _ = tables.rope_inv_freq(64, scaling=dyn, seq_len=1000, max_position_embeddings=256)
    b, _ = tables.rope_inv_freq(
        64, 10000.0, {**dyn, "original_max_position_embeddings": 256}, seq_len=1000
    )
    assert torch.equal(a, b)


def test_hf_rope_theta_inside_the_dict_and_legacy_rope_scaling():
    """``rope_theta`` inside the mapping is the base (it wins over ``theta``); a 4.x config.json
    (``rope_scaling`` + top-level ``rope_theta``) gives what HF builds from it."""
    T = pytest.importorskip("transformers")
    inv, _ = tables.rope_inv_freq(64, 10000.0, {"rope_type": "default", "rope_theta": 500.0})
    torch.testing.assert_close(inv, _inv(64, 500.0))
    legacy = {
        "hidden_size": 128,
        "num_attention_heads": 2,
        "max_position_embeddings": 2048,
        "rope_theta": 250000.0,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    }
    scaling = tables.hf_rope_scaling(legacy)
    assert scaling["rope_type"] == "linear" and scaling["rope_theta"] == 250000.0
    config = T.LlamaConfig(vocab_size=32, **legacy)
    torch.testing.assert_close(
        tables.rope_inv_freq(64, scaling=scaling)[0].float(), _hf_inv(config)[0], rtol=2e-6, atol=0
    )


def test_hf_partial_rotary_factor():
    config = _hf_config(
        {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, partial_rotary_factor=0.5
    )
    assert tables.hf_rotary_dim(config) == (128, 64)
    want, _ = _hf_inv(config)
    got, _ = tables.rope_inv_freq(64, scaling=tables.hf_rope_scaling(config))
    torch.testing.assert_close(got.float(), want, rtol=2e-6, atol=0)


def _saved_config_json(config) -> dict:
    """The config.json that ``save_pretrained`` writes for ``config``, read back as a dict."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        config.save_pretrained(d)
        with open(f"{d}/config.json") as f:
            return json.load(f)


def _hf_config_jsons():
    """(name, config.json dict, the config HF builds from it) for the dicts that HF's config classes
    read differently from their keys as written."""
    T = pytest.importorskip("transformers")
    T.logging.set_verbosity_error()
    out = []
    # a transformers 5 config.json with a 4.x rope_scaling added by hand (as model cards ask for
    # YaRN): HF's class takes rope_scaling
    qwen = _saved_config_json(T.Qwen2Config(vocab_size=32, hidden_size=256, num_attention_heads=2,
                                            num_key_value_heads=1, max_position_embeddings=131072))
    qwen["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    out.append(("rope_scaling-added", qwen))
    # GPT-NeoX / Pythia: rotary_pct and rotary_emb_base
    out.append(("gpt_neox", {"model_type": "gpt_neox", "hidden_size": 768, "num_attention_heads": 12,
                             "max_position_embeddings": 2048, "rotary_pct": 0.25, "rotary_emb_base": 1000000}))
    # Phi-3's legacy "yarn" with short/long factors, which Phi3Config renames to longrope
    out.append(("phi3-legacy-yarn", {
        "model_type": "phi3", "hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "short_factor": [1.0 + 0.02 * j for j in range(16)],
                         "long_factor": [1.0 + 1.5 * j for j in range(16)]}}))
    # a vision-language config.json, flat as Qwen2-VL's: the language model's RoPE is its text part's
    out.append(("qwen2_vl-flat", {
        "model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vision_config": {}}))
    # head_dim under another name (attribute_map) or derived by the class
    for cls in ("JetMoeConfig", "Zamba2Config", "Glm4MoeLiteConfig", "DeepseekV3Config"):
        if hasattr(T, cls):
            out.append((cls, _saved_config_json(getattr(T, cls)())))
    return [(name, cfg, T.AutoConfig.for_model(cfg["model_type"]).from_dict(dict(cfg)).get_text_config())
            for name, cfg in out]


def test_hf_config_json_dicts_read_as_hf_reads_them():
    """A config.json dict gives what HF's own config class builds from it: hand-added rope_scaling
    over rope_parameters, GPT-NeoX's rotary_pct / rotary_emb_base, Phi-3's legacy yarn (longrope),
    head_dim aliases; against ROPE_INIT_FUNCTIONS on that class's config."""
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for name, cfg, hf in _hf_config_jsons():
        head_dim, rotary_dim = tables.hf_rotary_dim(cfg)
        assert (head_dim, rotary_dim) == tables.hf_rotary_dim(hf), name
        kind = hf.rope_parameters["rope_type"]
        scaling = tables.hf_rope_scaling(cfg)
        assert scaling["rope_type"] == kind, name
        for seq_len in (None, 5000):
            if kind == "default":
                want, want_attn = _default_inv(hf), 1.0
            else:
                want, want_attn = ROPE_INIT_FUNCTIONS[kind](hf, None, seq_len=seq_len)
            inv, attn = tables.rope_inv_freq(rotary_dim, scaling=scaling, seq_len=seq_len)
            torch.testing.assert_close(inv.float(), want, rtol=4e-6, atol=0, msg=name)
            assert attn == pytest.approx(want_attn, rel=1e-9), name
        t = tables.RotaryEmbedding.from_hf_config(cfg, layout="BNSD").tables(4)
        assert t.cos.shape[-1] == head_dim, name


def test_hf_config_json_that_its_class_refuses_is_read_as_written():
    # transformers' validators refuse hidden_size 4000 with 48 heads; the dict's own keys still say
    # everything the RoPE needs, as they did before the class was asked.
    pytest.importorskip("transformers")
    cfg = {"model_type": "llama", "hidden_size": 4000, "num_attention_heads": 48, "head_dim": 128,
           "rope_theta": 500000.0}
    assert tables.hf_rotary_dim(cfg) == (128, 128)
    assert tables.hf_rope_scaling(cfg) == {"rope_type": "default", "rope_theta": 500000.0}


def _default_inv(config):
    base = config.rope_parameters["rope_theta"]
    dim = tables.hf_rotary_dim(config)[1]
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def test_hf_config_json_without_model_type_reads_the_aliases():
    # Read as written (no class to ask): the GPT-NeoX names and DeepSeek's qk_rope_head_dim still count.
    neox = {"hidden_size": 768, "num_attention_heads": 12, "rotary_pct": 0.25, "rotary_emb_base": 5000}
    assert tables.hf_rotary_dim(neox) == (64, 16)
    assert tables.hf_rope_scaling(neox)["rope_theta"] == 5000.0
    ds = {"hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64}
    assert tables.hf_rotary_dim(ds) == (64, 64)
    # a 4.x rope_scaling added to a transformers 5 rope_parameters: rope_scaling, as HF takes it
    both = {"hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 131072,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert tables.hf_rope_scaling(both)["rope_type"] == "yarn"


def test_hf_yarn_truncate_none_does_not_truncate():
    # HF reads rope_parameters.get("truncate", True): None is falsy, so no floor/ceil.
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for tr in (True, False, None):
        config = _hf_config({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                             "rope_theta": 10000.0, "truncate": tr})
        want, _ = ROPE_INIT_FUNCTIONS["yarn"](config, None)
        got, _ = tables.rope_inv_freq(128, scaling=tables.hf_rope_scaling(config))
        torch.testing.assert_close(got.float(), want, rtol=4e-6, atol=0, msg=str(tr))


@pytest.mark.parametrize("name", ["llama3", "yarn", "longrope"])
def test_rotary_embedding_from_hf_config_matches_hf_module(name):
    """Tables of RotaryEmbedding.from_hf_config against the cos/sin of HF's own rotary module
    (float32 angles in HF, float64 here)."""
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    params, kw, _ = HF_ROPES[name]
    config = _hf_config(dict(params), **kw)
    hf = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, dtype=torch.float32)
    pos = torch.arange(48)[None]
    cos, sin = hf(x, pos)
    rope = tables.RotaryEmbedding.from_hf_config(config, layout="BNSD")
    t = rope.tables(48)
    torch.testing.assert_close(t.cos, cos[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(t.sin, sin[0], rtol=0, atol=2e-5)


def test_for_layout_names_the_table_shapes_it_takes():
    for bad in (torch.randn(64), torch.randn(1, 1, 8, 64)):
        with pytest.raises(ValueError, match=r"for_layout: the table must be \[S, D\] or \[B, S, D\], got "):
            tables.for_layout(bad, "BSND")


def test_for_layout_views_broadcast_to_x_of_each_layout():
    """Every view for_layout returns broadcasts with x of its layout in the op (the result equals
    the op with the table expanded to x's shape by hand); per-batch tables are refused where x has
    no batch dim before S."""
    g = torch.Generator().manual_seed(3)
    B, S, N, D = 2, 5, 3, 8
    xs = {"BNSD": torch.randn(B, N, S, D, generator=g), "BSND": torch.randn(B, S, N, D, generator=g),
          "TND": torch.randn(S, N, D, generator=g), "SBND": torch.randn(S, B, N, D, generator=g),
          "SD": torch.randn(S, D, generator=g)}
    mat, rope_matrix = ext.get_half_matrix(D), ext.rope_matrix
    t2 = tables.rope_1d(S, D)
    for layout, x in xs.items():
        cos, sin = tables.for_layout(t2.cos, layout), tables.for_layout(t2.sin, layout)
        out = rope_matrix(x, mat, sin, cos)
        full = rope_matrix(x, mat, sin.expand_as(x).contiguous(), cos.expand_as(x).contiguous())
        assert torch.equal(out, full), layout
        # position s of x (its dim S) takes table row s
        sd = {"BNSD": 2, "BSND": 1, "TND": 0, "SBND": 0, "SD": 0}[layout]
        ref = rope_matrix(x.narrow(sd, S - 2, 1), mat, t2.sin[S - 2 : S - 1], t2.cos[S - 2 : S - 1])
        assert torch.equal(out.narrow(sd, S - 2, 1), ref), layout
    tb = tables.rope_1d(torch.arange(B * S).view(B, S), D)
    for layout in ("BNSD", "BSND"):
        x = xs[layout]
        cos, sin = tables.for_layout(tb.cos, layout), tables.for_layout(tb.sin, layout)
        out = rope_matrix(x, mat, sin, cos)
        full = rope_matrix(x, mat, sin.expand_as(x).contiguous(), cos.expand_as(x).contiguous())
        assert torch.equal(out, full), layout
        # sample 1 of x takes the table rows of sample 1
        ref = rope_matrix(x[1], mat, tables.for_layout(tb.sin[1], layout), tables.for_layout(tb.cos[1], layout))
        assert torch.equal(out[1], ref), layout
    for layout in ("TND", "SBND", "SD"):
        with pytest.raises(ValueError, match=rf"for_layout: a per-batch table \[B, S, D\] \(\[2, 5, 8\]\) cannot "
                                             rf"broadcast to {layout}"):
            tables.for_layout(tb.cos, layout)


def test_helpers_name_the_bad_argument():
    """Wrong argument types and ranges in the helpers give an error that names the argument, not
    an AttributeError or IndexError from inside."""
    import numpy as np
    from npu_ops_transformer_ext import models, parallel

    rope = tables.RotaryEmbedding(8, layout="BSND")
    with pytest.raises(TypeError, match="RotaryEmbedding: q must be a torch.Tensor, got ndarray"):
        rope(np.zeros((1, 4, 2, 8)))
    with pytest.raises(TypeError, match="RotaryEmbedding: positions must be a torch.Tensor or None, got list"):
        rope(torch.zeros(1, 4, 2, 8), positions=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="grid_positions: center must be a bool or one per axis"):
        tables.grid_positions((2, 2), center=[True])
    # arrays and lists of positions are taken where a tensor is
    assert torch.equal(tables.rope_nd(np.zeros((5, 2)), (8, 8)).cos, tables.rope_nd(torch.zeros(5, 2), (8, 8)).cos)
    pos = [[0, 1, 2]] * 3
    assert torch.equal(tables.rope_mrope(pos, 16, [2, 3, 3]).cos, tables.rope_mrope(torch.tensor(pos), 16, [2, 3, 3]).cos)
    with pytest.raises(TypeError, match="world_size must be an integer, got float"):
        parallel.shard_indices(8, 2.0, 0)
    with pytest.raises(TypeError, match="shard: expected a torch.Tensor, got ndarray"):
        parallel.shard(np.zeros((4, 4)), 2, 0, 0)
    with pytest.raises(ValueError, match=r"dim -3 is out of range for a tensor of shape \[4, 8\]"):
        parallel.shard_tables(torch.zeros(4, 8), torch.zeros(4, 8), 2, 0, seq_dim=-3)
    freqs = torch.polar(torch.ones(16, 4, dtype=F64), torch.zeros(16, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"wan_rope_apply: x must be \[B, L, N, D\] \(BSND\), got \[2, 4, 8\]"):
        models.wan_rope_apply(torch.zeros(2, 4, 8), [[1, 2, 2]], freqs)
    with pytest.raises(ValueError, match="need integers 0 <= sp_rank < sp_size, got sp_rank 2, sp_size 2"):
        models.wan_rope_apply(torch.zeros(1, 4, 2, 8), [[1, 2, 2]], freqs, sp_rank=2, sp_size=2)
    with pytest.raises(TypeError, match="freqs_cis must be a .cos, sin. pair .* got NoneType"):
        models.hunyuan_apply_rotary_emb(torch.zeros(1, 4, 2, 8), None, None)


def test_scaling_that_is_not_a_mapping_is_refused_everywhere():
    """rope_1d, rope_mrope and RotaryEmbedding refuse a scaling that is not a mapping with the
    reason (RotaryEmbedding at construction, not at its first call); an unknown type too."""
    with pytest.raises(TypeError, match="scaling must be None or a mapping"):
        tables.rope_1d(8, 16, scaling=4.0)
    with pytest.raises(TypeError, match="scaling must be None or a mapping"):
        tables.rope_mrope(torch.zeros(3, 4), 16, [2, 3, 3], scaling=2.0)
    with pytest.raises(TypeError, match="scaling must be None or a mapping"):
        tables.RotaryEmbedding(16, layout="BSND", scaling=2.0)
    with pytest.raises(ValueError, match="unknown scaling type 'ntk-by-parts'"):
        tables.RotaryEmbedding(16, layout="BSND", scaling={"type": "ntk-by-parts", "factor": 2.0})


def test_rotary_embedding_tables_cached_in_inference_mode_serve_training():
    """Tables first built under torch.inference_mode() are cached as normal tensors: a later call
    that records a graph can save them for backward."""
    rope = tables.RotaryEmbedding(64, layout="BSND")
    q, k = torch.randn(1, 8, 2, 64), torch.randn(1, 8, 2, 64)
    with torch.inference_mode():
        want = rope(q, k)
    qq = q.clone().requires_grad_()
    a, b = rope(qq, k)
    (a.sum() + b.sum()).backward()
    assert torch.equal(a.detach(), want[0]) and qq.grad is not None


def test_rotary_embedding_settings_are_fixed_and_copied():
    """The cached tables come from the settings: a later change to the caller's scaling dict does
    not reach the module, and assigning a setting raises instead of leaving stale tables."""
    import copy
    import pickle

    sc = {"rope_type": "linear", "factor": 2.0}
    rope = tables.RotaryEmbedding(16, layout="BNSD", scaling=sc)
    x = torch.randn(1, 2, 40, 16, dtype=F64)
    before = rope(x)
    sc["factor"] = 8.0  # the caller reuses its dict for another module
    t = tables.rope_1d(40, 16, scaling={"rope_type": "linear", "factor": 2.0})
    want = _apply(x, tables.RopeTables(t.cos, t.sin, t.mat))
    assert torch.equal(before, want) and torch.equal(rope(x), want)
    assert torch.equal(rope(x[:, :, 39:], offset=39), want[:, :, 39:])  # a rebuild keeps factor 2
    assert rope.scaling["factor"] == 2.0 and "'factor': 2.0" in rope.extra_repr()
    for name, value in (("theta", 500.0), ("layout", "BSND"), ("scaling", None), ("head_dim", 32),
                        ("rotary_dim", 8), ("mode", "interleave"), ("table_dtype", F64),
                        ("freqs_dtype", torch.float32)):
        with pytest.raises(AttributeError, match=f"RotaryEmbedding.{name} is fixed"):
            setattr(rope, name, value)
    with pytest.raises(TypeError):
        rope.scaling["factor"] = 4.0  # read-only
    # the module still copies and pickles, settings included
    for other in (copy.deepcopy(rope), pickle.loads(pickle.dumps(rope))):
        assert other.scaling == {"rope_type": "linear", "factor": 2.0}
        assert torch.equal(other(x), want)
    rope.extra = 1  # other attributes are set as on any module
    assert rope.extra == 1


def test_rotary_embedding_tables_written_by_a_caller_are_rebuilt():
    """tables() hands out views of the cache; a caller that writes into them in place does not
    change later results (the cache sees the write and rebuilds)."""
    rope = tables.RotaryEmbedding(16, layout="BNSD")
    x = torch.randn(1, 2, 8, 16, dtype=F64)
    want = rope(x)
    t = rope.tables(8)
    t.cos.mul_(0.5)
    assert torch.equal(rope(x), want)
    assert torch.equal(rope(x), tables.RotaryEmbedding(16, layout="BNSD")(x))


def test_yarn_and_longrope_need_a_factor_they_can_know():
    """No factor and nothing to derive it from is refused (it used to mean factor 1: LongRoPE's
    attention factor silently 1 instead of HF's); with max_position_embeddings= it is derived as
    HF derives it, and a 0 beta takes HF's default."""
    lr = {"rope_type": "longrope", "original_max_position_embeddings": 128,
          "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    for sc in (lr, {"rope_type": "yarn", "original_max_position_embeddings": 128}):
        with pytest.raises(ValueError, match=f"{sc['rope_type']} scaling needs 'factor'.*max_position_embeddings="):
            tables.rope_inv_freq(16, 10000.0, sc)
        with pytest.raises(ValueError, match="needs 'factor'"):
            tables.RotaryEmbedding(16, layout="BNSD", scaling=sc)
    _, attn = tables.rope_inv_freq(16, 10000.0, lr, max_position_embeddings=4096)
    assert attn == pytest.approx(math.sqrt(1 + math.log(32) / math.log(128)))
    y = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    base = tables.rope_inv_freq(64, 10000.0, y)
    for zero in ({"beta_fast": 0}, {"beta_slow": 0}, {"beta_fast": None}):
        got = tables.rope_inv_freq(64, 10000.0, {**y, **zero})
        assert torch.equal(got[0], base[0]) and got[1] == base[1]


@pytest.mark.parametrize(
    "scaling, match",
    [
        ({"rope_type": "linear", "factor": 0.0}, "factor must be a finite number > 0"),
        ({"rope_type": "linear", "factor": -2.0}, "factor must be a finite number > 0"),
        ({"rope_type": "ntk", "factor": -1.0}, "factor must be a finite number > 0"),
        ({"rope_type": "linear", "factor": float("inf")}, "factor must be a finite number > 0"),
        ({"rope_type": "llama3", "factor": "8"}, "factor must be a finite number > 0"),
        ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 0},
         "original_max_position_embeddings .* must be a number > 0"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": -4},
         "original_max_position_embeddings .* must be a number > 0"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": -1},
         "beta_fast and beta_slow must be finite numbers > 0"),
        ({"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
          "short_factor": [0.0, 1, 1, 1], "long_factor": [1] * 4}, "short_factor must be finite numbers > 0"),
        ({"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
          "short_factor": [1] * 4, "long_factor": [1, float("nan"), 1, 1]}, "long_factor must be finite"),
    ],
)
def test_scaling_values_out_of_range_are_refused(scaling, match):
    """Values that gave inf, NaN or complex frequencies (a warning at most) are errors."""
    seq = 100 if "long_factor" in scaling and "nan" in str(scaling["long_factor"]) else None
    with pytest.raises(ValueError, match=match):
        tables.rope_inv_freq(8, 10000.0, scaling, seq_len=seq)


def test_freqs_dtype_must_hold_the_angles():
    """A 16-bit freqs_dtype rounds the angles themselves (cos wrong by up to 2 at S = 4096)."""
    calls = (lambda dt: tables.rope_1d(8, 8, freqs_dtype=dt),
             lambda dt: tables.rope_nd((2, 2), (4, 4), freqs_dtype=dt),
             lambda dt: tables.rope_mrope(torch.zeros(2, 4), 8, [2, 2], freqs_dtype=dt),
             lambda dt: tables.rope_inv_freq(8, dtype=dt),
             lambda dt: tables.RotaryEmbedding(8, layout="BNSD", freqs_dtype=dt))
    for dt in (torch.float16, torch.bfloat16, torch.int64):
        for call in calls:
            with pytest.raises(TypeError, match="must be torch.float64 or torch.float32"):
                call(dt)
    assert torch.equal(tables.rope_1d(8, 8, freqs_dtype=torch.float32).cos,
                       tables.rope_1d(8, 8, freqs_dtype=torch.float32).cos)


def test_positions_given_as_tensors_are_never_misread():
    """A grid or length held in a tensor was read as one token's positions (a [D] table that
    broadcast over every token): now a 0-dim tensor for rope_1d and a 1-dim tensor for rope_nd are
    refused; a nested list of per-token positions and a grid of 0-dim int tensors work."""
    with pytest.raises(ValueError, match="0-dim tensor"):
        tables.rope_1d(torch.tensor(6), 8)
    assert tables.rope_1d(torch.tensor([6]), 8).cos.shape == (1, 8)
    with pytest.raises(ValueError, match=r"at least two dims, got a tensor of shape \[3\]"):
        tables.rope_nd(torch.tensor([2, 3, 4]), (4, 4, 4))
    grid = tables.rope_nd((2, 3, 4), (4, 4, 4))
    assert torch.equal(tables.rope_nd([torch.tensor(2), torch.tensor(3), torch.tensor(4)], (4, 4, 4)).cos, grid.cos)
    pos = tables.grid_positions((2, 3, 4))
    assert torch.equal(tables.rope_nd(pos.long().tolist(), (4, 4, 4)).cos, grid.cos)
    assert torch.equal(tables.rope_nd(pos, (4, 4, 4)).cos, grid.cos)


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_rope_nd_applies_length_dependent_scaling_per_axis(kind):
    """Dynamic NTK and LongRoPE depend on the sequence length: each rope_nd axis takes its own
    (largest position + 1), so an axis equals rope_1d over the same positions (it used to take
    the short-length frequencies at every length)."""
    sc = {"rope_type": kind, "factor": 4.0, "original_max_position_embeddings": 16,
          "short_factor": [1.0 + 0.01 * j for j in range(4)], "long_factor": [1.0 + 0.5 * j for j in range(4)]}
    grid = (3, 40)  # axis 0 stays short (3 <= 16), axis 1 goes long (40 > 16)
    t = tables.rope_nd(grid, (8, 8), scaling=[sc, sc], mode="half", dtype=F64)
    pos = tables.grid_positions(grid)
    for a in range(2):
        one = tables.rope_1d(pos[:, a], 8, scaling=sc, mode="half", dtype=F64)
        assert torch.equal(t.cos[:, 8 * a : 8 * a + 8], one.cos), a
    plain = tables.rope_nd(grid, (8, 8), mode="half", dtype=F64)
    assert not torch.equal(t.cos[:, 8:], plain.cos[:, 8:])


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: tables.rope_nd((2, -3, 4), (4, 4, 4)), ValueError, "every grid size must be an int >= 0, got -3"),
        (lambda: tables.grid_positions((2, 2.5)), ValueError, "every grid size must be an int >= 0"),
        (lambda: tables.rope_nd((2, 2), (4, 4), theta="10000"), TypeError, "theta must be a number"),
        (lambda: tables.rope_mrope(torch.zeros(3, 4), 16, [4, -1, 3]), ValueError, "sections must be pair counts >= 0"),
        (lambda: tables.rope_1d(4, 7), ValueError, "head_dim must be even when every dim rotates"),
        (lambda: tables.rope_1d(4, 8, rotary_dim=5), ValueError, "rotary_dim must be an even int in"),
        (lambda: tables.rope_1d(4, 8, offset=None), TypeError, "offset must be a finite int or float"),
        (lambda: tables.RotaryEmbedding(7, layout="BNSD"), ValueError, "head_dim must be even"),
        (lambda: tables.RotaryEmbedding(8, layout="BNSD", rotary_dim=3), ValueError, "rotary_dim must be"),
        (lambda: tables.RotaryEmbedding(8, layout="BNSD", theta=0), ValueError, "theta .* finite number > 0"),
        (lambda: tables.RotaryEmbedding(8, layout="BNSD", table_dtype=torch.int32), TypeError,
         "table_dtype must be a floating dtype"),
        (lambda: tables.RotaryEmbedding(8, layout="BNSD")(torch.zeros(1, 1, 2, 8), offset=None), TypeError,
         "offset must be a finite int or float"),
        (lambda: tables.RotaryEmbedding(8, layout="BNSD").tables(-1), ValueError, "seq_len must be an int >= 0"),
        (lambda: tables.hf_rotary_dim({}), ValueError, "neither head_dim nor hidden_size"),
    ],
)
def test_table_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_rope_nd_theta_per_axis_as_an_array():
    import numpy as np

    want = tables.rope_nd((2, 3), (4, 4), theta=[100.0, 10000.0])
    for th in (np.array([100.0, 10000.0]), torch.tensor([100.0, 10000.0], dtype=F64), (100.0, 10000.0)):
        assert torch.equal(tables.rope_nd((2, 3), (4, 4), theta=th).cos, want.cos)


def test_tables_built_in_pieces_equal_one_piece(monkeypatch):
    """Long tables are converted from float64 angles a block of rows at a time, short ones (a decode
    step's) in one piece without the padding step: the same bits either way, with and without a
    pass-through tail, a scaling factor and per-axis grids."""
    cases = {
        "1d": lambda: tables.rope_1d(37, 16, offset=5),
        "1d partial": lambda: tables.rope_1d(37, 16, rotary_dim=10, dtype=torch.bfloat16),
        "1d yarn": lambda: tables.rope_1d(37, 16, scaling={"rope_type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 16}),
        "1d positions": lambda: tables.rope_1d(torch.arange(40).reshape(2, 20) * 3, 16),
        "nd": lambda: tables.rope_nd(torch.randint(0, 50, (23, 3), generator=torch.Generator().manual_seed(0)),
                                     [4, 6, 6]),
        "nd partial": lambda: tables.rope_nd(torch.randint(0, 50, (23, 2), generator=torch.Generator().manual_seed(1)),
                                             [4, 6], head_dim=16),
    }
    whole = {k: f() for k, f in cases.items()}
    monkeypatch.setattr(tables, "_FINISH_ROWS", 3)
    for k, f in cases.items():
        got = f()
        for a, b in zip(got, whole[k]):
            assert a.dtype == b.dtype and a.shape == b.shape, k
            assert torch.equal(a.view(torch.int16) if a.element_size() == 2 else a.view(torch.int32)
                               if a.element_size() == 4 else a.view(torch.int64),
                               b.view(torch.int16) if b.element_size() == 2 else b.view(torch.int32)
                               if b.element_size() == 4 else b.view(torch.int64)), k


def test_bool_and_complex_positions_are_refused():
    """A mask passed for positions would rotate by angles 0 and 1 without a word."""
    mask = torch.tensor([[True, False, True, True]])
    rope = tables.RotaryEmbedding(16, layout="BNSD")
    q = torch.randn(1, 2, 4, 16)
    with pytest.raises(TypeError, match=r"RotaryEmbedding: positions must hold integers or real numbers, got dtype torch.bool"):
        rope(q, positions=mask)
    with pytest.raises(TypeError, match=r"positions must hold integers or real numbers, got dtype torch.complex64"):
        tables.rope_1d(mask.to(torch.complex64), 16)
    with pytest.raises(TypeError, match=r"rope_nd: positions must hold .* torch.bool"):
        tables.rope_nd(torch.ones(4, 3, dtype=torch.bool), [4, 6, 6])
    with pytest.raises(TypeError, match=r"rope_mrope: positions must hold .* torch.bool"):
        tables.rope_mrope(torch.ones(3, 4, dtype=torch.bool), 16, [2, 3, 3])
    # integer and float positions stay accepted
    assert rope(q, positions=mask.long()).shape == q.shape
    assert rope(q, positions=mask.float()).shape == q.shape


class _RopeBlock(torch.nn.Module):
    """A module applying RotaryEmbedding (head dim 8, BNSD) to q and k, for the export tests."""

    def __init__(self, rotary_dim=None):
        super().__init__()
        self.rope = tables.RotaryEmbedding(8, rotary_dim=rotary_dim, layout="BNSD")

    def forward(self, q, k):
        return self.rope(q, k)


@pytest.mark.parametrize("strict", [True, False])
def test_rotary_embedding_exports_with_a_dynamic_sequence_length(strict):
    """torch.export with a dynamic S (max given) of a module using RotaryEmbedding whose tables are
    built first for that max: the exported program slices them, and equals eager at other lengths."""

    m = _RopeBlock()
    m.rope.tables(64)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 1, 7, 8, generator=g)
    s = torch.export.Dim("S", min=2, max=64)
    ep = torch.export.export(m, (q, k), dynamic_shapes={"q": {2: s}, "k": {2: s}}, strict=strict)
    for n in (5, 20, 64):
        q2, k2 = torch.randn(2, 3, n, 8, generator=g), torch.randn(2, 1, n, 8, generator=g)
        for a, b in zip(ep.module()(q2, k2), m(q2, k2)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("rotary_dim", [None, 4])
@pytest.mark.parametrize("max_len", [64, None])
def test_rotary_embedding_exports_without_prebuilt_tables(strict, rotary_dim, max_len):
    """torch.export with a dynamic S and no tables built: the exported program builds them for the
    length it is given (in one piece, also past the eager build's row chunks, and padded where
    rotary_dim < head_dim), equal to eager; the module's cache keeps nothing from the trace."""
    m = _RopeBlock(rotary_dim)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 1, 7, 8, generator=g)
    s = torch.export.Dim("S", min=2, max=max_len) if max_len else torch.export.Dim("S", min=2)
    ep = torch.export.export(m, (q, k), dynamic_shapes={"q": {2: s}, "k": {2: s}}, strict=strict)
    assert not m.rope._cache
    lengths = (5, 64) if max_len else (5, 64, tables._FINISH_ROWS + 3)
    for n in lengths:
        q2, k2 = torch.randn(2, 3, n, 8, generator=g), torch.randn(2, 1, n, 8, generator=g)
        eager = _RopeBlock(rotary_dim)(q2, k2)
        for a, b in zip(ep.module()(q2, k2), eager):
            assert torch.equal(a, b)
    # the module still runs eagerly, from a cache of real tensors
    for a, b in zip(m(q, k), _RopeBlock(rotary_dim)(q, k)):
        assert torch.equal(a, b)
    assert all(type(v[0].cos) is torch.Tensor for v in m.rope._cache.values())


def test_rotary_embedding_export_strict_without_a_maximum_names_the_fix():
    """Strict export, no maximum, tables built for 64: the cache can serve only up to its length,
    and PyTorch's error says which maximum to give."""

    m = _RopeBlock()
    m.rope.tables(64)
    q, k = torch.randn(2, 3, 7, 8), torch.randn(2, 1, 7, 8)
    s = torch.export.Dim("S", min=2)
    with pytest.raises(Exception, match=r"Dim\('S'.*max=80"):
        torch.export.export(m, (q, k), dynamic_shapes={"q": {2: s}, "k": {2: s}}, strict=True)


def test_builders_refuse_a_packed_dtype_and_name_bad_inv_freq_arguments():
    """The packed float4 dtype (two values per element) is refused by the matrix and table builders
    and RotaryEmbedding with their own message, not torch's "not implemented" from inside; a
    non-int dim or non-number theta of rope_inv_freq is named."""
    f4 = getattr(torch, "float4_e2m1fn_x2", None)
    if f4 is not None:
        for call in (lambda: ext.get_half_matrix(8, dtype=f4), lambda: ext.get_interleave_matrix(8, dtype=f4),
                     lambda: tables.rope_1d(4, 8, mat_dtype=f4)):
            with pytest.raises(TypeError, match=r"dtype must be a real dtype .*not a packed one.*float4_e2m1fn_x2"):
                call()
        with pytest.raises(TypeError, match=r"dtype of the tables must be a floating dtype \(not a packed one: two values per element\)"):
            tables.rope_1d(4, 8, dtype=f4)
        with pytest.raises(TypeError, match=r"RotaryEmbedding: table_dtype must be .*not a packed one"):
            tables.RotaryEmbedding(8, layout="BNSD", table_dtype=f4)
    with pytest.raises(TypeError, match=r"rope_inv_freq: dim must be an int, got str '8'"):
        tables.rope_inv_freq("8")
    with pytest.raises(TypeError, match=r"rope_inv_freq: theta \(the base\) must be a real number, got str '1e4'"):
        tables.rope_inv_freq(8, "1e4")
    import numpy as np
    inv, _ = tables.rope_inv_freq(np.int64(8))
    assert torch.equal(inv, tables.rope_inv_freq(8)[0])
    assert torch.equal(tables.rope_inv_freq(torch.tensor(8), torch.tensor(1e4))[0], inv)
    assert torch.equal(tables.rope_1d(4, 8, theta=torch.tensor(500.0)).cos, tables.rope_1d(4, 8, theta=500.0).cos)


# ---- settings checked, caches kept consistent (red-team findings) --------------------------------


@pytest.mark.parametrize(
    "dtype, positions, offset",
    [(torch.uint8, [250, 251], 10), (torch.uint8, [1, 2], -3), (torch.int16, [1, 2], 65536), (torch.int32, [7, 3], 2**31 - 5)],
)
def test_rotary_embedding_positions_plus_offset_do_not_wrap_in_a_narrow_dtype(dtype, positions, offset):
    """positions + offset is the position whatever the positions' integer dtype (it used to be
    added in that dtype: uint8 250 + 10 rotated by position 4)."""
    d = 8
    rope = tables.RotaryEmbedding(d, layout="BNSD", freqs_dtype=F64)
    q = torch.randn(1, 2, 2, d, dtype=F64)
    p = torch.tensor(positions, dtype=dtype)
    got = rope(q, positions=p, offset=offset)
    ang = (torch.tensor(positions, dtype=F64) + offset)[:, None] * _inv(d, 10000.0)
    torch.testing.assert_close(got, _rot_complex(q, ang, "half"), rtol=1e-6, atol=1e-6)


def test_rotary_embedding_sees_a_write_into_the_mat_it_handed_out():
    """tables().mat is part of the cache like cos and sin: writing into it is seen (its version)
    and the cache rebuilt, so later calls keep their values."""
    rope = tables.RotaryEmbedding(8, layout="BNSD")
    q = torch.randn(1, 1, 4, 8)
    want = rope(q)
    rope.tables(4).mat.neg_()
    assert torch.equal(rope(q), want)
    assert torch.equal(rope.tables(4).mat, ext.get_half_matrix(8))


@pytest.mark.parametrize("kind", ["numpy", "tensor"])
def test_rotary_embedding_scaling_copies_arrays_of_factors(kind):
    """A LongRoPE factor list given as a NumPy array or a tensor is copied too: changing the
    caller's array later reaches neither the module's scaling nor any of its tables."""
    import numpy as np

    make = (lambda v: np.array(v)) if kind == "numpy" else (lambda v: torch.tensor(v, dtype=F64))
    short = make([1.0, 1.5, 2.0, 2.5])
    sc = {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 16,
          "short_factor": short, "long_factor": make([1.0] * 4)}
    rope = tables.RotaryEmbedding(8, layout="SD", scaling=sc, freqs_dtype=F64)
    cached = rope.tables(2, offset=1).cos.clone()
    built = rope.tables(2, offset=1.5).cos.clone()  # a fractional offset: built per call
    short[:] = 4.0
    assert rope.scaling["short_factor"] == (1.0, 1.5, 2.0, 2.5)
    assert torch.equal(rope.tables(2, offset=1).cos, cached)
    assert torch.equal(rope.tables(2, offset=1.5).cos, built)
    inv = _inv(8, 10000.0) / torch.tensor([1.0, 1.5, 2.0, 2.5], dtype=F64)
    attn = math.sqrt(1 + math.log(2.0) / math.log(16))
    ang = torch.tensor([1.5, 2.5], dtype=F64)[:, None] * inv
    torch.testing.assert_close(built[:, :4].double(), torch.cos(ang) * attn, rtol=1e-6, atol=1e-6)


def test_length_dependent_scaling_takes_a_fractional_largest_position():
    """seq_len of dynamic NTK and LongRoPE is the largest position + 1, fractional positions
    included (15.5 -> 16.5 > L = 16 scales; it used to be cut to 16, unscaled)."""
    d, theta, factor, L = 8, 10000.0, 4.0, 16
    sc = {"rope_type": "dynamic", "factor": factor, "original_max_position_embeddings": L}
    t = tables.rope_1d(torch.tensor([0.0, 15.5], dtype=F64), d, scaling=sc, dtype=F64)
    base = theta * (factor * 16.5 / L - (factor - 1)) ** (d / (d - 2))
    ang = 15.5 * _inv(d, base)
    torch.testing.assert_close(t.cos[1, : d // 2], torch.cos(ang), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(t.sin[1, : d // 2], torch.sin(ang), rtol=1e-12, atol=1e-12)


_LONGROPE = {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 16,
             "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"long_factor": [1.0] * 3}, ValueError, r"longrope long_factor must have dim // 2 = 4 entries, got 3"),
        ({"long_factor": [float("nan"), 1.0, 1.0, 1.0]}, ValueError, r"long_factor must be finite numbers > 0"),
        ({"long_factor": [0.0, 1.0, 1.0, 1.0]}, ValueError, r"long_factor must be finite numbers > 0"),
        ({"long_factor": None}, ValueError, r"long_factor must have dim // 2 = 4 entries, got 0"),
        ({"short_factor": "1111"}, TypeError, r"short_factor must be a list of dim // 2 = 4 numbers"),
        ({"attention_factor": float("nan")}, ValueError, r"attention_factor must be a finite number > 0, got nan"),
        ({"rope_theta": True}, TypeError, r"rope_theta must be a real number, got bool True"),
        ({"rope_theta": "500000"}, TypeError, r"rope_theta must be a real number, got str"),
    ],
)
def test_bad_longrope_settings_are_refused_at_build_whichever_list_a_call_uses(change, error, match):
    sc = dict(_LONGROPE, **change)
    with pytest.raises(error, match=match):
        tables.RotaryEmbedding(8, layout="BNSD", scaling=sc)
    with pytest.raises(error, match=match):
        tables.rope_inv_freq(8, scaling=sc)  # seq_len None: the short factors' call
    with pytest.raises(error, match=match):
        tables.rope_1d(4, 8, scaling=sc)


@pytest.mark.parametrize(
    "scaling, error, match",
    [
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0.0}, ValueError, r"low_freq_factor must be a finite number > 0, got 0.0"),
        ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": float("inf")}, ValueError, r"high_freq_factor must be a finite number > 0"),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": "1", "mscale_all_dim": 1},
         TypeError, r"the scaling's mscale must be a real number, got str '1'"),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": -1.0},
         ValueError, r"attention_factor must be a finite number > 0, got -1.0"),
        ({"rope_type": "default", "rope_theta": "abc"}, TypeError, r"rope_theta must be a real number"),
    ],
)
def test_bad_scaling_numbers_are_refused_naming_the_key(scaling, error, match):
    with pytest.raises(error, match=match):
        tables.rope_inv_freq(8, scaling=scaling)


def test_scaling_numbers_may_be_numpy_or_0_dim_tensors():
    import numpy as np

    want = tables.rope_inv_freq(8, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "rope_theta": 500000.0})
    got = tables.rope_inv_freq(8, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": np.float32(1.0),
                                           "high_freq_factor": torch.tensor(4.0), "rope_theta": np.float64(500000.0)})
    assert torch.equal(got[0], want[0]) and got[1] == want[1]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: tables.rope_nd([2, 2], [4, 4], head_dim=9.0), ValueError, r"rope_nd: head_dim must be an int >= sum\(axes_dim\) = 8, got 9.0"),
        (lambda: tables.rope_nd([2, 2], [4, 4], head_dim=6), ValueError, r"rope_nd: head_dim must be an int >= sum\(axes_dim\) = 8, got 6"),
        (lambda: tables.rope_nd([2, 2], [4.5, 4]), TypeError, r"rope_nd: axes_dim must be ints, got \[4.5, 4\]"),
        (lambda: tables.rope_nd([], []), ValueError, r"rope_nd: axes_dim must be one or more positive even dims, got \[\]"),
        (lambda: tables.rotate_matrix([4], 6.0), TypeError, r"rotate_matrix: head_dim must be an int, got float 6.0"),
        (lambda: tables.rotate_matrix([4.0]), TypeError, r"rotate_matrix: rotary_dims must be ints"),
        (lambda: tables.rotate_matrix(4), TypeError, r"rotate_matrix: rotary_dims must be a sequence of ints, got int 4"),
        (lambda: tables.rope_mrope(torch.zeros(3, 4), None, [2, 2, 2]), TypeError, r"rope_mrope: head_dim must be an int > 0, got NoneType None"),
        (lambda: tables.rope_mrope(torch.zeros(3, 4), 16, [2.7, 2, 2]), TypeError, r"rope_mrope: sections must be ints, got \[2.7, 2, 2\]"),
        (lambda: tables.hf_rope_scaling(None), TypeError, r"the config must be a transformers PretrainedConfig or its config.json as a dict, got NoneType None"),
    ],
)
def test_builders_refuse_bad_dims_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_builders_take_integer_dims_of_numpy_and_0_dim_tensors():
    import numpy as np

    want = tables.rope_nd([2, 3], [4, 4], head_dim=10)
    got = tables.rope_nd([2, 3], [np.int64(4), torch.tensor(4)], head_dim=np.int32(10))
    assert torch.equal(got.cos, want.cos) and torch.equal(got.mat, want.mat)
    assert torch.equal(tables.rotate_matrix(torch.tensor([4, 4]), torch.tensor(10)), tables.rotate_matrix([4, 4], 10))


def test_rotary_embedding_takes_a_0_dim_tensor_theta_as_rope_inv_freq_does():
    q = torch.randn(1, 1, 3, 8)
    a = tables.RotaryEmbedding(8, layout="BNSD", theta=torch.tensor(500.0))
    b = tables.RotaryEmbedding(8, layout="BNSD", theta=500.0)
    assert a.theta == 500.0 and torch.equal(a(q), b(q))
    with pytest.raises(ValueError, match=r"RotaryEmbedding: theta \(the base\) must be a finite number > 0"):
        tables.RotaryEmbedding(8, layout="BNSD", theta=torch.tensor([500.0, 1.0]))


def test_rotary_embedding_builds_far_positions_per_call(monkeypatch):
    """The cache holds at most _CACHE_MAX_POSITIONS positions: a call needing a position past it
    builds its own rows (a decode step at position 2^31 used to build a table of every position
    before it), with the same values; below the cap the cache grows as before, capped."""
    monkeypatch.setattr(tables, "_CACHE_MAX_POSITIONS", 64)
    d = 8
    rope = tables.RotaryEmbedding(d, layout="SD", freqs_dtype=F64)

    def rows():
        return {k[2]: v[0].cos.shape[0] for k, v in rope._cache.items()}

    rope.tables(40)
    assert rows() == {"all": 50}
    rope.tables(4, offset=56)  # needs 60: grows to min(75, 100, 64)
    assert rows() == {"all": 64}
    q = torch.randn(3, d, dtype=F64)
    for offset in (61, 2**31 - 2):
        got = rope(q, offset=offset)
        ang = (torch.arange(3, dtype=F64) + offset)[:, None] * _inv(d, 10000.0)
        torch.testing.assert_close(got, _rot_complex(q, ang, "half"), rtol=1e-6, atol=1e-6)
    pos = torch.tensor([5, 2**40, 63])
    got = rope(q, positions=pos)
    ang = pos.to(F64)[:, None] * _inv(d, 10000.0)
    torch.testing.assert_close(got, _rot_complex(q, ang, "half"), rtol=1e-5, atol=1e-5)
    assert rows() == {"all": 64}
