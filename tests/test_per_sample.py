"""Per-sample tables off the CPU.

Positions that differ between the rows of a batch give tables that vary along B and S. The CPU
kernel takes them in one call; the NPU kernel takes tables that vary along one dim of x only, so
off the CPU the package's own calls (model drop-ins, HF patching, ``RotaryEmbedding``) go sample
by sample. Here the NPU is stood in for by the CPU twin, which runs the NPU host code and refuses
what the NPU launcher refuses, and must give the CPU op's bits.
"""
import pytest
import torch
from npu_ops_transformer_ext import _per_sample, matrices, models, tables, twin
from npu_ops_transformer_ext import transformers as tfm

B, H, L, D = 3, 2, 8, 32


def _as_npu(monkeypatch):
    """Makes the package's calls take the off-CPU path, through the twin; returns the call log."""
    calls = []

    def one(x, mat, sin, cos):
        calls.append(tuple(x.shape))
        return twin.run(x, mat, sin, cos)[0]

    def qk(q, k, mat, sin, cos):
        calls.append(tuple(q.shape))
        return twin.run(q, mat, sin, cos)[0], twin.run(k, mat, sin, cos)[0]

    monkeypatch.setattr(_per_sample, "_one_table_dim_only", lambda device: True)
    monkeypatch.setattr(_per_sample, "rope_matrix", one)
    monkeypatch.setattr(_per_sample, "rope_matrix_qk", qk)
    return calls


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.int16) if a.element_size() == 2 else a.view(torch.int32),
                       b.view(torch.int16) if b.element_size() == 2 else b.view(torch.int32))


def _flux_pe(pos):
    omega = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = pos[..., None] * omega
    pe = torch.stack([ang.cos(), -ang.sin(), ang.sin(), ang.cos()], -1)
    return pe.reshape(*pos.shape, D // 2, 2, 2).float()[:, None]  # [B, 1, L, D/2, 2, 2]


def _cases():
    g = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 500, (B, L), generator=g).double()
    xq = torch.randn(B, H, L, D, generator=g).bfloat16()
    xk = torch.randn(B, 1, L, D, generator=g).bfloat16()
    xs = torch.randn(B, L, H, D, generator=g).bfloat16()
    fc = torch.polar(torch.ones(B, L, D // 2), torch.rand(B, L, D // 2, generator=g) * 6)
    rope_bnsd = tables.RotaryEmbedding(D, layout="BNSD")
    rope_bsnd = tables.RotaryEmbedding(D, layout="BSND")
    ipos = pos.long()
    cos = torch.randn(B, L, D, generator=g)
    sin = torch.randn(B, L, D, generator=g)
    qf, kf = torch.randn(B, H, L, D, generator=g), torch.randn(B, 1, L, D, generator=g)
    return {
        "flux_apply_rope": lambda: models.flux_apply_rope(xq, xk, _flux_pe(pos)),
        "apply_rotary_emb complex": lambda: models.apply_rotary_emb(xs, fc, use_real=False),
        "RotaryEmbedding bnsd q, k": lambda: rope_bnsd(xq, xk, positions=ipos),
        "RotaryEmbedding bsnd q": lambda: rope_bsnd(xs, positions=ipos),
        "HF q, k": lambda: tfm._rope_qk(qf, kf, cos[:, None], sin[:, None]),
        "HF q, k of two dtypes": lambda: tfm._rope_qk(qf, kf.double().float().bfloat16(), cos[:, None], sin[:, None]),
        "wan_rope_apply, two grids": lambda: models.wan_rope_apply(
            torch.randn(B, 12, H, D, generator=torch.Generator().manual_seed(1)), [[1, 2, 3], [2, 2, 3], [1, 3, 4]],
            _wan_freqs()),
    }


def _wan_freqs(max_len=64, theta=10000.0):
    d = D
    parts = [d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)]
    fs = []
    for p in parts:
        inv = 1.0 / theta ** (torch.arange(0, p, 2, dtype=torch.float64) / p)
        fs.append(torch.polar(torch.ones(max_len, p // 2, dtype=torch.float64), torch.outer(torch.arange(max_len), inv)))
    return torch.cat(fs, dim=1)


@pytest.mark.parametrize("name", list(_cases()))
def test_per_sample_tables_go_sample_by_sample_off_the_cpu(name, monkeypatch):
    want = _cases()[name]()  # the CPU: one call with the per-sample tables
    calls = _as_npu(monkeypatch)
    got = _cases()[name]()
    for a, b in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        if a is not None:
            _same(b, a)
    assert len(calls) >= B and all(c[0] == 1 for c in calls), calls


def test_without_the_split_the_npu_host_code_refuses_them(monkeypatch):
    # the control: the same calls in one piece fail the NPU's table rule (so the test above can fail)
    _as_npu(monkeypatch)
    monkeypatch.setattr(_per_sample, "_loop_dims", lambda x, tables: [])
    for name, call in _cases().items():
        with pytest.raises(ValueError, match="varies along 2 dims of x"):
            call()
        assert name


def test_on_the_cpu_it_is_one_call(monkeypatch):
    calls = []
    real = _per_sample.rope_matrix_qk
    monkeypatch.setattr(_per_sample, "rope_matrix_qk", lambda *a: calls.append(1) or real(*a))
    _cases()["flux_apply_rope"]()
    assert calls == [1]


def _tables_of_more_dims():
    g = torch.Generator().manual_seed(2)
    xb = torch.randn(B, H, L, D, generator=g).bfloat16()  # BNSD
    xs = torch.randn(B, L, H, D, generator=g).bfloat16()  # BSND
    kb = torch.randn(B, H, L, D, generator=g).bfloat16()
    mat = matrices.get_half_matrix(D)
    t4 = torch.randn(2, B, H, L, D, generator=g)
    ts = torch.randn(2, B, L, H, D, generator=g)
    t3 = torch.randn(2, H, L, D, generator=g)
    # name: (call, x's dims walked slice by slice off the CPU)
    return {
        "[B, H, S, D] tables, BNSD": (lambda: _per_sample.rope(xb, mat, t4[0], t4[1]), B * H),
        "[B, S, H, D] tables, BSND": (lambda: _per_sample.rope(xs, mat, ts[0], ts[1]), B * H),  # S kept: longest
        "[H, S, D] tables of a 4-dim x": (lambda: _per_sample.rope(xb, mat, t3[0], t3[1]), H),
        "sin [B, 1, S, D], cos [1, H, 1, D]": (
            lambda: _per_sample.rope(xb, mat, t4[0][:, :1], t4[1][:1, :, :1]), B * H),
        "q, k with [B, H, S, D] tables": (lambda: _per_sample.rope_qk(xb, kb, mat, t4[0], t4[1]), B * H),
        "fp32 x, [B, H, 1, D] tables": (lambda: _per_sample.rope(xb.float(), mat, t4[0][:, :, :1], t4[1]), B * H),
    }


@pytest.mark.parametrize("name", list(_tables_of_more_dims()))
def test_tables_varying_along_more_dims_go_slice_by_slice_off_the_cpu(name, monkeypatch):
    call, slices = _tables_of_more_dims()[name]
    want = call()
    calls = _as_npu(monkeypatch)
    got = call()
    for a, b in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        _same(b, a)
    assert len(calls) == slices, calls
    monkeypatch.setattr(_per_sample, "_loop_dims", lambda x, tables: [])
    with pytest.raises(ValueError, match="varies along [23] dims of x|varies along .* and cos"):
        call()


def test_slice_by_slice_keeps_the_gradients(monkeypatch):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, H, L, D, generator=g, dtype=torch.float64).float().requires_grad_()
    sin = torch.randn(B, H, L, D, generator=g).requires_grad_()
    cos = torch.randn(B, H, L, D, generator=g).requires_grad_()
    mat = matrices.get_interleave_matrix(D)
    w = torch.randn(B, H, L, D, generator=g)
    (_per_sample.rope(x, mat, sin, cos) * w).sum().backward()
    want = [t.grad.clone() for t in (x, sin, cos)]
    for t in (x, sin, cos):
        t.grad = None
    monkeypatch.setattr(_per_sample, "_one_table_dim_only", lambda device: True)
    calls = []
    real = _per_sample.rope_matrix
    monkeypatch.setattr(_per_sample, "rope_matrix", lambda *a: calls.append(1) or real(*a))
    (_per_sample.rope(x, mat, sin, cos) * w).sum().backward()
    assert len(calls) == B * H
    for t, w_ in zip((x, sin, cos), want):
        torch.testing.assert_close(t.grad, w_, rtol=0, atol=0)
