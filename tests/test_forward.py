"""Forward numerics of rope_matrix on CPU against the fp32 reference and the seed's versions."""
import npu_ops_transformer_ext as ext
import pytest
import torch
from cases import SPLITS, forward_cases, make_inputs
from npu_ops_transformer_ext.matrices import get_half_matrix, get_interleave_matrix
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference, rope_v1, rope_v2

op = torch.ops.npu_ops_transformer_ext.rope_matrix

TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("layout,form,mode,split,dt,tdt", list(forward_cases()))
def test_signed_permutation_bit_exact(layout, form, mode, split, dt, tdt):
    x, y, sin, cos = make_inputs(layout, form, mode, split, dt, tdt)
    before = [t.clone() for t in (x, y, sin, cos)]
    out = op(x, y, sin, cos)
    assert out.dtype == x.dtype and out.shape == x.shape and out.is_contiguous()
    ref = rope_matrix_reference(x, y, sin, cos)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    # The seed's small-op version (v1: rearrangement per axis), in fp32 with one rounding.
    torch.testing.assert_close(out, rope_v1(x, sin, cos, mode, SPLITS[split]), rtol=0, atol=0)
    for t, b in zip((x, y, sin, cos), before):
        assert torch.equal(t, b), "an input was modified"


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_per_axis_matrices_v2(mode, split):
    x, y, sin, cos = make_inputs("bnsd", "11sd", mode, split, "bf16", "x", seed=3)
    mats = [mode_matrix(mode, [d]) for d in SPLITS[split]]
    torch.testing.assert_close(op(x, y, sin, cos), rope_v2(x, sin, cos, mats), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("ydtype", ["x", "fp32"])
def test_dense_matrix_within_tolerance(dtype, ydtype):
    g = torch.Generator().manual_seed(1)
    d = 128
    x = torch.randn(2, 3, 37, d, generator=g).to(dtype)
    y = (torch.randn(d, d, generator=g) / d**0.5).to(torch.float32 if ydtype == "fp32" else dtype)
    sin = torch.randn(37, d, generator=g).to(dtype)
    cos = torch.randn(37, d, generator=g).to(dtype)
    out = op(x, y, sin, cos)
    ref = rope_matrix_reference(x, y, sin, cos)
    torch.testing.assert_close(out, ref, rtol=TOL[dtype], atol=TOL[dtype])
    # x @ y must be rounded to x.dtype before the elementwise step: compare against the variant
    # that skips that rounding, which must be farther away for the low-precision dtypes.
    if dtype in (torch.bfloat16, torch.float16):
        unrounded = (x.float() * cos.float() + (x.float() @ y.float()) * sin.float()).to(dtype)
        err_ref = (out.float() - ref.float()).abs().mean()
        err_unrounded = (out.float() - unrounded.float()).abs().mean()
        assert err_ref < err_unrounded


@pytest.mark.parametrize("d", [2, 6, 16, 20, 40, 64, 96, 130, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_head_dims(d, dtype):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(1, 2, 9, d, generator=g).to(dtype)
    sin = torch.randn(9, d, generator=g).to(dtype)
    cos = torch.randn(9, d, generator=g).to(dtype)
    for y in (get_half_matrix(d, dtype=dtype), get_interleave_matrix(d, dtype=dtype)):
        torch.testing.assert_close(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


def _random_signed_permutation(d, g, dtype):
    perm = torch.randperm(d, generator=g)
    sign = torch.randint(0, 2, (d,), generator=g) * 2 - 1
    y = torch.zeros(d, d)
    y[perm, torch.arange(d)] = sign.float()
    return y.to(dtype)


@pytest.mark.parametrize("d", [16, 64, 128])
def test_arbitrary_signed_permutation_takes_gather_path(d):
    # A random permutation scatters partners across the row: exercises the gather fallback.
    g = torch.Generator().manual_seed(7)
    y = _random_signed_permutation(d, g, torch.bfloat16)
    assert ext.is_signed_permutation(y)
    x = torch.randn(2, 3, 11, d, generator=g).bfloat16()
    sin, cos = torch.randn(2, 11, d, generator=g).bfloat16().unsqueeze(1).unbind(0)
    torch.testing.assert_close(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


def test_partial_permutation_zero_columns_pass_through():
    # Partial rotary: the last 32 dims have y = 0, cos = 1, sin = 0, so they pass through unchanged.
    d, r = 128, 96
    y = torch.zeros(d, d, dtype=torch.bfloat16)
    y[:r, :r] = get_half_matrix(r)
    x = torch.randn(2, 4, 10, d).bfloat16()
    sin = torch.randn(10, d).bfloat16()
    cos = torch.randn(10, d).bfloat16()
    sin[:, r:] = 0
    cos[:, r:] = 1
    out = op(x, y, sin, cos)
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    assert torch.equal(out[..., r:], x[..., r:])


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_every_kernel_family_is_exact(monkeypatch, isa, dtype):
    # NPU_OPS_CPU_ISA caps the kernel family, so the portable path is tested on this CPU too.
    monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
    g = torch.Generator().manual_seed(11)
    for mode, split in (("half", [128]), ("interleave", [44, 44, 40]), ("quarter", [64, 64])):
        y = mode_matrix(mode, split, dtype=dtype)
        x = torch.randn(2, 5, 23, 128, generator=g).to(dtype)
        sin = torch.randn(23, 128, generator=g).to(dtype)
        cos = torch.randn(1, 1, 23, 128, generator=g).float()
        torch.testing.assert_close(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    # A scattered permutation (gathers) and a partial one (all-zero columns pass x*cos through).
    yp = _random_signed_permutation(128, g, dtype)
    torch.testing.assert_close(op(x, yp, sin, cos), rope_matrix_reference(x, yp, sin, cos), rtol=0, atol=0)
    ypart = torch.zeros(128, 128, dtype=dtype)
    ypart[:96, :96] = mode_matrix("half", [96], dtype=dtype)
    torch.testing.assert_close(op(x, ypart, sin, cos), rope_matrix_reference(x, ypart, sin, cos), rtol=0, atol=0)
    yd = (torch.randn(128, 128, generator=g) / 12).to(dtype)
    torch.testing.assert_close(op(x, yd, sin, cos), rope_matrix_reference(x, yd, sin, cos),
                               rtol=TOL[dtype], atol=TOL[dtype])


def test_rounding_is_round_to_nearest_even_with_subnormals():
    # Values whose fp32 result lands exactly between two bf16 values, and bf16 subnormals, which a
    # flush-to-zero conversion would lose.
    d = 16
    y = get_half_matrix(d, dtype=torch.float32)
    x = torch.tensor([[1.0 + 2**-8, 1.0 + 3 * 2**-8, 2**-130, -(2**-133)] * 4], dtype=torch.float32).bfloat16()
    x = torch.cat([x, torch.full((1, d), 2**-127).bfloat16()])
    sin = torch.zeros(d)
    cos = torch.tensor([1.0 + 2**-9] * d)
    out = op(x, y, sin, cos)
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    assert (out[0, 2] != 0).item() and (out[1] != 0).all().item(), "subnormal flushed to zero"


def test_non_contiguous_inputs():
    g = torch.Generator().manual_seed(5)
    d = 128
    y = mode_matrix("half", [44, 44, 40])
    # q sliced out of a fused qkv projection, viewed as BSND, then transposed to BNSD.
    qkv = torch.randn(2, 37, 3 * 4 * d, generator=g).bfloat16()
    q = qkv[..., : 4 * d].unflatten(-1, (4, d)).transpose(1, 2)
    assert not q.is_contiguous()
    # Tables: a strided view of a larger table and an expanded one.
    big = torch.randn(74, 2 * d, generator=g).bfloat16()
    sin = big[::2, :d]
    cos = torch.randn(1, d, generator=g).bfloat16().expand(37, d)
    out = op(q, y, sin, cos)
    assert out.is_contiguous()
    torch.testing.assert_close(out, rope_matrix_reference(q.contiguous(), y, sin.contiguous(), cos.contiguous()),
                               rtol=0, atol=0)
    # x whose last dim is not unit-stride.
    xt = torch.randn(2, 3, d, 37, generator=g).bfloat16().transpose(-1, -2)
    torch.testing.assert_close(op(xt, y, sin, cos), rope_matrix_reference(xt, y, sin, cos), rtol=0, atol=0)
    # Non-contiguous y.
    yt = y.t().contiguous().t()
    torch.testing.assert_close(op(q, yt, sin, cos), out, rtol=0, atol=0)


def test_long_sequence_many_threads():
    # Enough rows for every thread, S not divisible by anything convenient.
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, 24, 1521, 128, generator=g).bfloat16()
    sin = torch.randn(1, 1, 1521, 128, generator=g).bfloat16()
    cos = torch.randn(1, 1, 1521, 128, generator=g).bfloat16()
    y = mode_matrix("half", [44, 44, 40])
    torch.testing.assert_close(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


def test_output_never_aliases_input():
    x = torch.randn(2, 8, 64).bfloat16()
    y = get_half_matrix(64)
    sin = torch.zeros(8, 64).bfloat16()
    cos = torch.ones(8, 64).bfloat16()
    out = op(x, y, sin, cos)
    assert torch.equal(out, x)
    assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("shape", [(0, 4, 128), (2, 0, 128), (3, 5, 0)])
def test_empty(shape):
    d = shape[-1]
    x = torch.randn(shape).bfloat16()
    out = op(x, torch.zeros(d, d).bfloat16(), torch.randn(shape[-2], d).bfloat16(), torch.randn(shape[-2], d).bfloat16())
    assert out.shape == x.shape and out.dtype == x.dtype


def test_nan_and_inf_propagate():
    d = 16
    y = get_interleave_matrix(d, dtype=torch.float32)
    x = torch.ones(1, 2, d)
    x[0, 0, 2] = float("nan")
    x[0, 1, 5] = float("inf")
    sin = torch.full((2, d), 0.5)
    cos = torch.full((2, d), 0.5)
    out = op(x, y, sin, cos)
    # Row 0: element 2 and its interleave partner 3 see the NaN; the rest are finite.
    assert torch.isnan(out[0, 0, 2]) and torch.isnan(out[0, 0, 3])
    assert torch.isfinite(out[0, 0, [0, 1] + list(range(4, d))]).all()
    # Row 1: x[5] = inf: out[5] = inf*cos + x4*sin = inf, out[4] = x4*cos - inf*sin = -inf.
    assert out[0, 1, 5] == float("inf") and out[0, 1, 4] == float("-inf")
    # Inf in a table propagates too: 0 * inf is NaN.
    x2 = torch.zeros(1, 1, d)
    sin2 = torch.full((1, d), float("inf"))
    assert torch.isnan(op(x2, y, sin2, cos[:1])).all()


def test_float64():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 7, 64, generator=g, dtype=torch.float64)
    y = mode_matrix("half", [32, 32], dtype=torch.float64)
    sin = torch.randn(7, 64, generator=g, dtype=torch.float64)
    cos = torch.randn(7, 64, generator=g, dtype=torch.float32)
    ref = x * cos.double() + (x @ y) * sin
    torch.testing.assert_close(op(x, y, sin, cos), ref, rtol=0, atol=0)


# ---- The same bits on every ISA --------------------------------------------------------------
# NPU_OPS_CPU_ISA caps the kernel family; None is the widest this CPU has (AVX512_BF16 here, whose
# vdpbf16ps and vcvtneps2bf16 flush subnormals). Families this CPU lacks fall back to a lower one.
EVERY_ISA = [None, "avx512", "avx2", "generic"]
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _per_isa(monkeypatch, *args):
    outs = {}
    for isa in EVERY_ISA:
        if isa is None:
            monkeypatch.delenv("NPU_OPS_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("NPU_OPS_CPU_ISA", isa)
        outs[isa or "native"] = op(*args)
    monkeypatch.delenv("NPU_OPS_CPU_ISA", raising=False)
    return outs


def _assert_same_bits(outs, expected=None):
    ref = expected if expected is not None else outs["native"]
    for isa, out in outs.items():
        bad = (out.view(_BITS[out.dtype]) != ref.view(_BITS[ref.dtype])).nonzero()
        assert len(bad) == 0, f"{isa}: {len(bad)} elements differ, first at {bad[0].tolist()}: " \
            f"{out[tuple(bad[0])].item()!r} vs {ref[tuple(bad[0])].item()!r}"


def _dense_contract(x, y, sin, cos):
    # The dense contract step by step: x @ y accumulated in fp32 over the rows of y in order (bf16
    # x with a y exact in bf16, none subnormal, D even: 1, 0, 3, 2, ...), one fused multiply-add
    # each (emulated in fp64: the product is exact there), rounded to x.dtype, then x*cos + xy*sin
    # in fp32 ops.
    d = x.shape[-1]
    xf, yf = x.float(), y.float()
    sub = (yf != 0) & (yf.abs() < torch.finfo(torch.float32).tiny)
    pairwise = x.dtype == torch.bfloat16 and d % 2 == 0 and torch.equal(yf.bfloat16().float(), yf) and not sub.any()
    xd, yd = xf.double().movedim(-1, 0).unsqueeze(-1), yf.double()
    acc = torch.zeros(x.shape[:-1] + (d,))
    for k in range(d):
        i = k ^ 1 if pairwise and (k ^ 1) < d else k
        acc = torch.addcmul(acc.double(), xd[i], yd[i]).float()
    xy = acc.to(x.dtype).float()
    return (xf * cos.float() + xy * sin.float()).to(x.dtype)


def test_dense_bf16_subnormal_x_is_not_flushed(monkeypatch):
    # vdpbf16ps reads the subnormal x as zero: 0.0 on AVX512_BF16, 2.02e-39 elsewhere.
    x = torch.full((4, 32), 1e-39).to(torch.bfloat16)
    y = (2 * torch.eye(32)).to(torch.bfloat16)
    sin, cos = torch.ones(32), torch.zeros(32)
    outs = _per_isa(monkeypatch, x, y, sin, cos)
    _assert_same_bits(outs, rope_matrix_reference(x, y, sin, cos))
    assert outs["native"][0, 0].item() == pytest.approx(2.02e-39, rel=1e-2)


def _subnormal_rows(shape, dtype, g):
    # Normal values, with some rows holding subnormals of the dtype, tiny values whose products
    # with y are subnormal in fp32, and zeros.
    x = torch.randn(shape, generator=g)
    tiny = torch.finfo(dtype).tiny
    rows = x.view(-1, shape[-1])
    for r in range(0, rows.shape[0], 5):
        cols = torch.randint(0, shape[-1], (3,), generator=g)
        rows[r, cols[0]] = tiny * 0.37
        rows[r, cols[1]] = -tiny * 2.0**-3
        rows[r, cols[2]] = 2.0**-120 if dtype != torch.float16 else 2.0**-20
    rows[3, :7] = 0.0
    rows[7] *= tiny * 2.0**-3  # a whole row of subnormals
    rows[9] *= tiny * 2.0**10  # normal, with products that are subnormal in fp32
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("ykind", ["x", "fp32", "tiny"])
def test_dense_same_bits_on_every_isa(monkeypatch, dtype, ykind):
    g = torch.Generator().manual_seed(21)
    d = 96 if ykind == "tiny" else 128
    x = _subnormal_rows((3, 41, d), dtype, g)
    y = torch.randn(d, d, generator=g) / d**0.5
    if ykind == "tiny":
        y[::7] *= 2.0**-60  # entries whose products with normal x are subnormal
    y = y.to(torch.float32 if ykind == "fp32" else dtype)
    sin = torch.randn(41, d, generator=g).to(dtype)
    cos = torch.randn(41, d, generator=g).to(dtype)
    sin[5, :9] = torch.finfo(dtype).tiny / 4  # subnormal table entries too
    outs = _per_isa(monkeypatch, x, y, sin, cos)
    _assert_same_bits(outs, _dense_contract(x, y, sin, cos))
    torch.testing.assert_close(outs["native"], rope_matrix_reference(x, y, sin, cos), rtol=TOL[dtype], atol=TOL[dtype])


def test_dense_bf16_accumulation_order_same_on_every_isa(monkeypatch):
    # Normal values only: the fp32 sums of the dot-product GEMM must round as the other ISAs' do
    # (a few of these elements differed when they summed the rows of y in another order).
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 128, 128, generator=g).bfloat16()
    y = torch.randn(128, 128, generator=g).bfloat16()
    sin, cos = torch.ones(128), torch.zeros(128)
    _assert_same_bits(_per_isa(monkeypatch, x, y, sin, cos), _dense_contract(x, y, sin, cos))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mode,split", [("half", [128]), ("interleave", [128]), ("half", [44, 44, 40]),
                                        ("quarter", [64, 64])])
def test_signed_permutation_subnormals_and_nan_same_bits_on_every_isa(monkeypatch, dtype, mode, split):
    g = torch.Generator().manual_seed(22)
    x = _subnormal_rows((2, 23, 128), dtype, g)
    y = mode_matrix(mode, split, dtype=dtype)
    sin = torch.randn(23, 128, generator=g).to(dtype)
    cos = torch.randn(23, 128, generator=g).to(dtype)
    sin[4, ::3] = torch.finfo(dtype).tiny / 8
    cos[6, ::5] = -torch.finfo(dtype).tiny / 2
    outs = _per_isa(monkeypatch, x, y, sin, cos)
    _assert_same_bits(outs)
    # Values against the reference (its matmul turns -0 into +0 where the kernel keeps -0 exactly).
    torch.testing.assert_close(outs["native"], rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    # NaN of either sign: c10 writes every bf16 NaN as 0x7FC0 (vcvtneps2bf16 kept sign and payload).
    x[0, 1, 3] = float("nan")
    x[1, 2, 7] = -float("nan")
    if dtype == torch.bfloat16:
        x.view(torch.int16)[1, 5, 9] = 0xFFA0 - 0x10000  # a negative NaN with a payload
    _assert_same_bits(_per_isa(monkeypatch, x, y, sin, cos))
    # Results that are subnormal in bf16 (rounded from fp32, not flushed).
    s = torch.full((23, 128), 0.5)
    xs = torch.full((2, 23, 128), 2.0**-127).bfloat16()
    _assert_same_bits(_per_isa(monkeypatch, xs, mode_matrix(mode, split), s, s),
                      rope_matrix_reference(xs, mode_matrix(mode, split), s, s))


# ---- Any rank ----------------------------------------------------------------------------------
def _high_rank_case(rank, layout, g, d=32, dtype=torch.bfloat16):
    # Sizes 2 in every third dim (1 elsewhere), the tables varying in some of them; x strided,
    # transposed or expanded.
    sizes = [2 if i % 3 == 0 else 1 for i in range(rank - 1)] + [d]
    tsizes = [s if i % 2 == 0 else 1 for i, s in enumerate(sizes[:-1])] + [d]
    if layout == "strided":
        # every other element of the last dim, every other index of dims 0 and 3
        wide = [2 * s if i in (0, 3, rank - 1) else s for i, s in enumerate(sizes)]
        big = torch.randn(wide, generator=g).to(dtype)
        x = big[tuple(slice(None, None, 2) if i in (0, 3, rank - 1) else slice(None) for i in range(rank))]
    elif layout == "transposed":
        x = torch.randn(sizes, generator=g).to(dtype).transpose(0, rank - 4).contiguous().transpose(0, rank - 4)
    else:  # expanded: stride 0 in every broadcast dim of size 2
        base = [1 if (s == 2 and t == 1) else s for s, t in zip(sizes, tsizes)]
        x = torch.randn(base, generator=g).to(dtype).expand(sizes)
    sin = torch.randn(tsizes, generator=g).to(dtype)
    cos = torch.randn(tsizes[2:], generator=g).to(dtype)  # lower rank: broadcast on the left
    return x, get_half_matrix(d, dtype=dtype), sin, cos


@pytest.mark.parametrize("rank", [17, 18, 19, 20])
@pytest.mark.parametrize("layout", ["strided", "transposed", "expanded"])
def test_rank_above_16(rank, layout):
    g = torch.Generator().manual_seed(rank)
    x, y, sin, cos = _high_rank_case(rank, layout, g)
    assert x.dim() == rank
    out = op(x, y, sin, cos)
    assert out.shape == x.shape
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    yd = torch.randn(32, 32, generator=g).bfloat16()
    torch.testing.assert_close(op(x, yd, sin, cos), rope_matrix_reference(x, yd, sin, cos),
                               rtol=TOL[torch.bfloat16], atol=TOL[torch.bfloat16])
    q, k = torch.ops.npu_ops_transformer_ext.rope_matrix_qk(x, x * 2, y, sin, cos)
    torch.testing.assert_close(q, op(x, y, sin, cos), rtol=0, atol=0)
    torch.testing.assert_close(k, op(x * 2, y, sin, cos), rtol=0, atol=0)
    xi = x.contiguous()
    torch.ops.npu_ops_transformer_ext.rope_matrix_(xi, y, sin, cos)
    torch.testing.assert_close(xi, out, rtol=0, atol=0)


def test_more_than_16_table_dims_and_broadcast_dims():
    # 17 dims where the tables vary and 2 where they broadcast (rank 20, D = 8, fp32).
    g = torch.Generator().manual_seed(3)
    x = torch.randn([2] * 19 + [8], generator=g)
    sin = torch.randn([2] * 17 + [8], generator=g)
    cos = torch.randn([1] * 2 + [2] * 17 + [8], generator=g)
    y = mode_matrix("interleave", [8], dtype=torch.float32)
    torch.testing.assert_close(op(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


def test_rank_above_16_under_torch_compile():
    g = torch.Generator().manual_seed(5)
    x, y, sin, cos = _high_rank_case(18, "strided", g)

    def f(x, y, sin, cos):
        return ext.rope_matrix(x, y, sin, cos) + torch.ops.npu_ops_transformer_ext.rope_matrix(x * 2, y, sin, cos)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    torch.testing.assert_close(compiled(x, y, sin, cos), f(x, y, sin, cos), rtol=0, atol=0)
    torch.testing.assert_close(f(x, y, sin, cos),
                               (rope_matrix_reference(x, y, sin, cos).float()
                                + rope_matrix_reference(x * 2, y, sin, cos).float()).bfloat16(), rtol=0, atol=0)


def test_rank_above_16_twin_agrees():
    # The NPU host code (through its CPU twin) takes any rank too, with the same bits.
    from npu_ops_transformer_ext import twin

    g = torch.Generator().manual_seed(6)
    x = torch.randn([2] + [1] * 13 + [3, 16, 2, 64], generator=g).bfloat16()
    y = get_half_matrix(64)
    sin, cos = torch.randn(2, 16, 1, 64, generator=g).bfloat16().unbind(0)
    out, _ = twin.run(x, y, sin, cos)
    assert x.dim() == 18 and out.shape == x.shape
    assert torch.equal(out.view(torch.int16), op(x, y, sin, cos).view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_partner_zero_after_zero_column_starts_its_own_run(dtype):
    # A chunk whose partners span three source vectors is planned as runs of consecutive partners.
    # Lane 5 reads element 0 right after lane 4, an all-zero column (partner -1): it must start a
    # new run, not extend the run of lanes 0-3 (-1 == 0 - 1 made it read element 45).
    d = 64
    partner = [-1] * d
    partner[0:4] = range(40, 44)
    partner[5:9] = range(4)
    partner[9:13] = range(20, 24)
    y = torch.zeros(d, d)
    for c, s in enumerate(partner):
        if s >= 0:
            y[s, c] = 1.0
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, d, generator=g).to(dtype)
    sin = torch.randn(5, d, generator=g).to(dtype)
    cos = torch.randn(5, d, generator=g).to(dtype)
    out = torch.ops.npu_ops_transformer_ext.rope_matrix(x, y.to(dtype), sin, cos)
    assert torch.equal(out, rope_matrix_reference(x, y.to(dtype), sin, cos))
