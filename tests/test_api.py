"""The op's registration and API: fused q/k, in-place, opcheck, torch.compile, errors, random shapes."""
import npu_ops_transformer_ext as ext
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference

ops = torch.ops.npu_ops_transformer_ext


def _inputs(shape=(2, 3, 17, 128), dtype=torch.bfloat16, mode="half", split=(44, 44, 40), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    s = shape[-2]
    d = shape[-1]
    sin = torch.randn(1, 1, s, d, generator=g).to(dtype)
    cos = torch.randn(1, 1, s, d, generator=g).to(dtype)
    return x, mode_matrix(mode, list(split), dtype=dtype), sin, cos


def test_functional_wrapper_matches_op():
    x, y, sin, cos = _inputs()
    assert torch.equal(ext.rope_matrix(x, y, sin, cos), ops.rope_matrix(x, y, sin, cos))
    assert ext.rope_matrix.__doc__.lstrip().startswith("Rotary")
    assert "Shapes" in ext.rope_matrix.__doc__


def test_qk_fused_gqa():
    # q and k with different head counts (GQA), BSND, [1, S, 1, D] tables in fp32.
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 19, 8, 128, generator=g).bfloat16()
    k = torch.randn(2, 19, 2, 128, generator=g).bfloat16()
    sin = torch.randn(1, 19, 1, 128, generator=g)
    cos = torch.randn(1, 19, 1, 128, generator=g)
    y = mode_matrix("interleave", [128])
    qo, ko = ext.rope_matrix_qk(q, k, y, sin, cos)
    torch.testing.assert_close(qo, rope_matrix_reference(q, y, sin, cos), rtol=0, atol=0)
    torch.testing.assert_close(ko, rope_matrix_reference(k, y, sin, cos), rtol=0, atol=0)


def test_qk_different_ranks_and_errors():
    q = torch.randn(1, 4, 9, 64)
    k = torch.randn(9, 64)
    y = mode_matrix("half", [64], dtype=torch.float32)
    sin, cos = torch.randn(9, 64), torch.randn(9, 64)
    qo, ko = ext.rope_matrix_qk(q, k, y, sin, cos)
    torch.testing.assert_close(qo, rope_matrix_reference(q, y, sin, cos), rtol=0, atol=0)
    torch.testing.assert_close(ko, rope_matrix_reference(k, y, sin, cos), rtol=0, atol=0)
    with pytest.raises(TypeError, match="q and k must have the same dtype"):
        ext.rope_matrix_qk(q, k.double(), y, sin, cos)
    with pytest.raises(ValueError, match="k must have last dim|y must be"):
        ext.rope_matrix_qk(q, torch.randn(9, 32), y, sin, cos)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("mode,split", [("half", (128,)), ("interleave", (128,)), ("quarter", (64, 64)),
                                        ("half", (44, 44, 40)), ("interleave-half", (128,))])
def test_inplace(dtype, mode, split):
    # Partners live in other chunks of the same row: the row must be read before it is written.
    x, y, sin, cos = _inputs(dtype=dtype, mode=mode, split=split)
    expected = rope_matrix_reference(x, y, sin, cos)
    ptr = x.data_ptr()
    assert ext.rope_matrix_(x, y, sin, cos) is None
    assert x.data_ptr() == ptr
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def test_inplace_non_contiguous_and_dense():
    x, y, sin, cos = _inputs(shape=(2, 17, 3, 128))
    xv = x.transpose(1, 2)  # BNSD view of BSND memory
    sin, cos = torch.randn(17, 128).bfloat16(), torch.randn(1, 1, 17, 128).bfloat16()
    expected = rope_matrix_reference(xv, y, sin, cos)
    ext.rope_matrix_(xv, y, sin, cos)
    torch.testing.assert_close(xv, expected, rtol=0, atol=0)
    yd = torch.randn(128, 128).bfloat16() / 11
    x2 = torch.randn(3, 5, 128).bfloat16()
    expected = ops.rope_matrix(x2, yd, sin[:5], cos[0, 0, :5])
    ext.rope_matrix_(x2, yd, sin[:5], cos[0, 0, :5])
    torch.testing.assert_close(x2, expected, rtol=0, atol=0)
    # Last dim not unit-stride.
    x3 = torch.randn(2, 128, 5).bfloat16().transpose(-1, -2)
    expected = rope_matrix_reference(x3, y, sin[:5], cos[0, 0, :5])
    ext.rope_matrix_(x3, y, sin[:5], cos[0, 0, :5])
    torch.testing.assert_close(x3, expected, rtol=0, atol=0)


def test_inplace_refuses_overlap():
    x, y, sin, cos = _inputs(shape=(1, 1, 4, 128))
    with pytest.raises(ValueError, match="shares memory with sin"):
        ext.rope_matrix_(x, y, x.view(4, 128)[:], cos)
    with pytest.raises(ValueError, match="x overlaps itself"):
        ext.rope_matrix_(torch.randn(1, 128).bfloat16().expand(4, 128), y, sin[0, 0], cos[0, 0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_opcheck(dtype):
    x, y, sin, cos = _inputs(shape=(2, 3, 5, 64), dtype=dtype, split=(64,))
    torch.library.opcheck(ops.rope_matrix.default, (x, y, sin, cos))
    torch.library.opcheck(ops.rope_matrix_qk.default, (x, x[:, :1].clone(), y, sin, cos))
    torch.library.opcheck(ops.rope_matrix_.default, (x.clone(), y, sin, cos))
    yd = torch.randn(64, 64).to(dtype)
    torch.library.opcheck(ops.rope_matrix.default, (x, yd, sin.float(), cos))


def test_torch_compile_fullgraph():
    x, y, sin, cos = _inputs()

    def f(x, y, sin, cos):
        q = ext.rope_matrix(x, y, sin, cos)
        k = torch.ops.npu_ops_transformer_ext.rope_matrix(x * 2, y, sin, cos)
        return q + k

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    torch.testing.assert_close(compiled(x, y, sin, cos), f(x, y, sin, cos), rtol=0, atol=0)
    # Dynamic shapes: a second sequence length traces once with symbolic S.
    x2, y2, sin2, cos2 = _inputs(shape=(2, 3, 29, 128), seed=4)
    compiled_dyn = torch.compile(f, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled_dyn(x2, y2, sin2, cos2), f(x2, y2, sin2, cos2), rtol=0, atol=0)


def test_meta_shapes():
    x = torch.empty(2, 3, 5, 128, device="meta", dtype=torch.bfloat16)
    y = torch.empty(128, 128, device="meta", dtype=torch.bfloat16)
    t = torch.empty(5, 128, device="meta", dtype=torch.float32)
    out = ops.rope_matrix(x, y, t, t)
    assert out.shape == x.shape and out.device.type == "meta" and out.dtype == x.dtype


# ---- bad input: every message names the argument and shows expected and actual -----------------

D = 128
_x = torch.randn(2, 3, 5, D).bfloat16()
_y = torch.zeros(D, D).bfloat16()
_t = torch.randn(5, D).bfloat16()

BAD = [
    pytest.param((torch.randn(D).bfloat16(), _y, _t, _t), ValueError, r"x must have rank >= 2 .*got \[128\]", id="x-rank1"),
    pytest.param((_x.int(), _y, _t, _t), TypeError, r"x must have dtype BFloat16, Half, Float or Double, got Int", id="x-int"),
    pytest.param((_x, torch.zeros(64, 64).bfloat16(), _t, _t), ValueError, r"y must be \[D, D\] with D = x.size\(-1\) = 128, got \[64, 64\]", id="y-shape"),
    pytest.param((_x, torch.zeros(D, D, D).bfloat16(), _t, _t), ValueError, r"y must be \[D, D\].*got \[128, 128, 128\]", id="y-rank"),
    pytest.param((_x, _y.half(), _t, _t), TypeError, r"y must have dtype BFloat16 \(x.dtype\) or Float, got Half", id="y-dtype"),
    pytest.param((_x, _y, torch.randn(5, 64).bfloat16(), _t), ValueError, r"sin must have last dim D = x.size\(-1\) = 128, got \[5, 64\]", id="sin-lastdim"),
    pytest.param((_x, _y, _t, torch.randn(6, D).bfloat16()), ValueError, r"cos \[6, 128\] does not broadcast to x \[2, 3, 5, 128\]", id="cos-broadcast"),
    pytest.param((_x, _y, torch.randn(1, 2, 3, 5, D).bfloat16(), _t), ValueError, r"sin must have rank 1..4", id="sin-rank"),
    pytest.param((_x, _y, _t.half(), _t), TypeError, r"sin must have dtype BFloat16 \(x.dtype\) or Float, got Half", id="sin-dtype"),
    pytest.param((_x, _y, _t, _t.double()), TypeError, r"cos must have dtype BFloat16 \(x.dtype\) or Float, got Double", id="cos-dtype"),
    pytest.param((_x, _y, torch.randn(2, 1, D).bfloat16(), _t), ValueError, r"sin \[2, 1, 128\] does not broadcast", id="sin-bad-heads"),
]


@pytest.mark.parametrize("args,exc,msg", BAD)
def test_bad_input_raises_before_writing(args, exc, msg):
    with pytest.raises(exc, match=msg):
        ops.rope_matrix(*args)
    # The same check holds for the in-place variant, which must leave x untouched.
    x = args[0].clone()
    if x.dim() >= 2 and x.is_floating_point():
        before = x.clone()
        with pytest.raises(exc):
            ops.rope_matrix_(x, *args[1:])
        assert torch.equal(x, before)


@pytest.mark.parametrize("args,exc,msg", BAD)
def test_bad_input_raises_while_tracing(args, exc, msg):
    # The fake kernel mirrors the C++ checks: the same error under FakeTensorMode.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) for a in args]
        with pytest.raises(exc):
            ops.rope_matrix(*fake)


def test_different_devices():
    y_meta = torch.empty(D, D, device="meta", dtype=torch.bfloat16)
    with pytest.raises((ValueError, RuntimeError), match="y must be on x's device|device"):
        ops.rope_matrix(_x, y_meta, _t, _t)


# ---- randomized shapes and strides --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    s=st.integers(1, 40),
    half_d=st.integers(1, 80),
    mode=st.sampled_from(["half", "interleave"]),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
    table_fp32=st.booleans(),
    bcast_mask=st.integers(0, 15),
    cos_mask=st.integers(0, 15),
    transpose=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_shapes_and_strides(lead, s, half_d, mode, dtype, table_fp32, bcast_mask, cos_mask, transpose, seed):
    g = torch.Generator().manual_seed(seed)
    d = 2 * half_d
    shape = tuple(lead) + (s, d)
    x = torch.randn(shape, generator=g).to(dtype)
    if transpose and x.dim() >= 3:
        x = x.transpose(0, -2).contiguous().transpose(0, -2)  # same values, permuted strides
    # sin and cos broadcast independently (each its own shape and rank), each dtype on its own.
    tshape = tuple(1 if (bcast_mask >> i) & 1 else n for i, n in enumerate(shape[:-1])) + (d,)
    cshape = tuple(1 if (cos_mask >> i) & 1 else n for i, n in enumerate(shape[:-1])) + (d,)
    cshape = cshape[cos_mask % 2:] if len(cshape) > 1 else cshape
    sin = torch.randn(tshape, generator=g).to(torch.float32 if table_fp32 else dtype)
    cos = torch.randn(cshape, generator=g).to(dtype if table_fp32 else torch.float32)
    y = mode_matrix(mode, [d], dtype=dtype)
    torch.testing.assert_close(ops.rope_matrix(x, y, sin, cos), rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


# ---- large outputs come from the output cache ---------------------------------------------------


@pytest.mark.parametrize("cache_mb", ["512", "0"])
def test_large_outputs_reuse_buffers_without_stale_values(monkeypatch, cache_mb):
    monkeypatch.setenv("NPU_OPS_CPU_OUTPUT_CACHE_MB", cache_mb)
    g = torch.Generator().manual_seed(3)
    shape = (1, 4, 2048, 128)  # 2 MiB of bf16 per tensor x 2 (q, k): above the cache's threshold
    y = mode_matrix("interleave", [128])
    sin, cos = torch.randn(2, 2048, 128, generator=g).unbind(0)
    seen = set()
    for i in range(4):
        x = torch.randn((2,) + shape[1:], generator=g).bfloat16()
        out = ops.rope_matrix(x, y, sin, cos)
        torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
        seen.add(out.data_ptr())
        # A different input into a (possibly) reused buffer: every element must be rewritten.
        x2 = torch.zeros_like(x)
        out2 = ops.rope_matrix(x2, y, sin, cos)
        assert (out2 == 0).all()
        del out, out2
    if cache_mb != "0":
        assert len(seen) < 4, "freed outputs were not reused"


def test_cached_output_behaves_like_any_tensor():
    x = torch.randn(2, 4, 2048, 128).bfloat16()
    y = mode_matrix("half", [128])
    sin = cos = torch.randn(2048, 128).bfloat16()
    out = ops.rope_matrix(x, y, sin, cos)
    ref = out.clone()
    out.resize_(4, 4, 2048, 128)  # grows through the allocator
    assert torch.equal(out[:2], ref)
    out.add_(1)
    assert out.is_contiguous() and out.device.type == "cpu"
