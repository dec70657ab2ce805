"""The op's registration and API: fused q/k, in-place, opcheck, torch.compile, errors, random shapes."""
import json
import textwrap

import npu_ops_transformer_ext as ext
import pytest
import torch
from fresh_python import fresh_env, run_python
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
    assert "Shapes" in ext.rope_matrix.__doc__


@pytest.mark.parametrize("fn,order", [(ext.rope_matrix, "(x, mat, sin, cos)"), (ext.rope_matrix_, "(x, mat, sin, cos)"),
                                      (ext.rope_matrix_qk, "(q, k, mat, sin, cos)")])
def test_docstring_first_line_states_order_and_shapes(fn, order):
    first = fn.__doc__.strip().splitlines()[0]
    assert order in first and "[D, D]" in first and "[..., D]" in first and "broadcast" in first, first


def test_tables_by_keyword():
    # sin and cos by keyword, in either order, give the positional result; a swap is visible.
    x, y, sin, cos = _inputs(shape=(1, 2, 5, 64), split=(64,))
    ref = ext.rope_matrix(x, y, sin, cos)
    assert torch.equal(ext.rope_matrix(x, y, cos=cos, sin=sin), ref)
    assert torch.equal(ext.rope_matrix(x, mat=y, sin=sin, cos=cos), ref)
    assert not torch.equal(ext.rope_matrix(x, y, sin=cos, cos=sin), ref)
    qo, ko = ext.rope_matrix_qk(x, x * 2, y, cos=cos, sin=sin)
    assert torch.equal(qo, ref)
    assert torch.equal(ko, ext.rope_matrix(x * 2, y, sin=sin, cos=cos))
    x2 = x.clone()
    ext.rope_matrix_(x2, y, cos=cos, sin=sin)
    assert torch.equal(x2, ref)


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
    with pytest.raises(ValueError, match=r"q and k must have the same last dim D, got q \[1, 4, 9, 64\] and k \[9, 32\]"):
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
    pytest.param((_x.int(), _y, _t, _t), TypeError, r"x must have dtype torch.bfloat16, torch.float16, torch.float32 or torch.float64, got torch.int32; pass x.float\(\)", id="x-int"),
    pytest.param((_x, torch.zeros(64, 64).bfloat16(), _t, _t), ValueError, r"mat must be \[D, D\] with D = x.size\(-1\) = 128, got \[64, 64\]; build it for D, e.g. get_half_matrix\(128\)", id="mat-shape"),
    pytest.param((torch.randn(3, 7), torch.eye(8), torch.ones(7), torch.ones(7)), ValueError, r"mat must be \[D, D\] with D = x.size\(-1\) = 7, got \[8, 8\]; pass a \[7, 7\] mat \(the mode builders need an even D > 0\)", id="mat-shape-odd-D"),
    pytest.param((torch.randn(3, 0), torch.eye(8), torch.ones(0), torch.ones(0)), ValueError, r"D = x.size\(-1\) = 0, got \[8, 8\]; pass a \[0, 0\] mat", id="mat-shape-D0"),
    pytest.param((_x, torch.zeros(D, D, D).bfloat16(), _t, _t), ValueError, r"mat must be \[D, D\].*got \[128, 128, 128\]", id="mat-rank"),
    pytest.param((_x, torch.ones(D, D, dtype=torch.complex64), _t, _t), TypeError, r"mat must have dtype torch.bfloat16 \(x.dtype\) or torch.float32 \(or another floating or integer dtype whose entries x.dtype holds exactly\), got torch.complex64; pass mat.to\(x.dtype\)", id="mat-dtype"),
    pytest.param((_x.float(), torch.ones(D, D, dtype=torch.complex64), _t.float(), _t.float()), TypeError, r"mat must have dtype torch.float32 \(x.dtype\) \(or another .*, got torch.complex64; pass mat.to\(x.dtype\)", id="mat-dtype-fp32-x"),
    pytest.param((_x, _y, torch.randn(5, 64).bfloat16(), _t), ValueError, r"sin must have last dim D = x.size\(-1\) = 128, got \[5, 64\]", id="sin-lastdim"),
    pytest.param((_x, _y, _t, torch.randn(6, D).bfloat16()), ValueError, r"cos \[6, 128\] does not broadcast to x \[2, 3, 5, 128\]: dim 0 is 6, expected 1 or 5 .*for_layout\(cos, layout\)", id="cos-broadcast"),
    pytest.param((_x[:1], _y, torch.randn(2, 3, 5, D).bfloat16(), _t), ValueError, r"sin \[2, 3, 5, 128\] does not broadcast to x \[1, 3, 5, 128\]: dim 0 is 2, expected 1 \(dims align", id="sin-broadcast-x-dim-1"),
    pytest.param((_x, _y, torch.randn(1, 2, 3, 5, D).bfloat16(), _t), ValueError, r"sin must have rank 1..4", id="sin-rank"),
    pytest.param((_x, _y, _t.int(), _t), TypeError, r"sin must have a floating dtype \(e.g. torch.float32 or x.dtype\), got torch.int32; pass sin.float\(\)", id="sin-dtype"),
    pytest.param((_x.float(), _y.float(), _t.float(), _t.int()), TypeError, r"cos must have a floating dtype .*, got torch.int32; pass cos.float\(\)", id="cos-dtype-fp32-x"),
    pytest.param((_x, _y, torch.randn(2, 1, D).bfloat16(), _t), ValueError, r"sin \[2, 1, 128\] does not broadcast", id="sin-bad-heads"),
]


def test_messages_use_python_names():
    # Python dtype names, Python argument names, never "Float or Float".
    for args, exc, msg in [p.values for p in BAD]:
        with pytest.raises(exc) as info:
            ops.rope_matrix(*args)
        text = str(info.value)
        for c10_name in ("BFloat16", "Half", "Float", "Double", " y ", " y:"):
            assert c10_name not in text, text
    with pytest.raises(TypeError, match=r"q and k must have the same dtype, got torch.float32 and torch.float64; pass k.to\(q.dtype\)"):
        ext.rope_matrix_qk(torch.randn(9, 64), torch.randn(9, 64).double(), torch.eye(64), torch.ones(64), torch.ones(64))


@pytest.mark.parametrize("compiled", [False, True])
def test_qk_dtype_mismatch_is_named_before_mat_exactness(compiled):
    # A float16 mat that q's float32 holds and k's bfloat16 does not: the call is refused for the
    # dtypes (what the caller must change), in eager and while tracing alike, not for mat.
    mat = torch.eye(64, dtype=torch.float16) * 1.0009765625  # 1 + 2**-10: not a bfloat16
    q, k = torch.randn(9, 64), torch.randn(9, 64).bfloat16()
    f = torch.compile(ext.rope_matrix_qk, fullgraph=True) if compiled else ext.rope_matrix_qk
    if compiled:
        torch._dynamo.reset()
    with pytest.raises(Exception, match=r"q and k must have the same dtype, got torch.float32 and torch.bfloat16"):
        f(q, k, mat, torch.ones(64), torch.ones(64))


def test_keyword_names_of_the_registered_ops():
    x, y, sin, cos = _inputs(shape=(1, 2, 5, 64), split=(64,))
    out = ops.rope_matrix(x, mat=y, sin=sin, cos=cos)
    assert torch.equal(out, ops.rope_matrix(x, y, sin, cos))
    assert [a.name for a in ops.rope_matrix.default._schema.arguments] == ["x", "mat", "sin", "cos"]
    assert [a.name for a in ops.rope_matrix_qk.default._schema.arguments] == ["q", "k", "mat", "sin", "cos"]
    assert [a.name for a in ops.rope_matrix_.default._schema.arguments] == ["x", "mat", "sin", "cos"]


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
        with pytest.raises(exc, match=msg):
            ops.rope_matrix(*fake)


_NONE_CASES = [(op, i, grad) for op, n in (("rope_matrix", 4), ("rope_matrix_", 4), ("rope_matrix_qk", 5))
               for i in range(n) for grad in (False, True)]


@pytest.mark.parametrize("op,i,grad", _NONE_CASES)
def test_none_for_a_tensor_is_named_on_every_path(op, i, grad):
    # torch.ops passes None for a Tensor argument as an undefined tensor: it gave "every argument
    # must be a defined tensor" (no name), "tensor does not have a device" from autograd when another
    # input required grad, an AttributeError from the fake kernel, a pybind signature dump from
    # twin.run.
    from torch._subclasses.fake_tensor import FakeTensorMode

    names = ["q", "k", "mat", "sin", "cos"] if op == "rope_matrix_qk" else ["x", "mat", "sin", "cos"]
    msg = f"{op}: {names[i]} must be a tensor, got None"
    x, y, sin, cos = _inputs(shape=(1, 2, 5, 64), split=(64,))
    args = [x, x.clone(), y, sin, cos] if op == "rope_matrix_qk" else [x, y, sin, cos]
    if grad:  # another argument requires grad (autograd's own checks ran first)
        j = next(j for j in range(len(args)) if j != i and names[j] != "x")
        args[j] = args[j].clone().requires_grad_()
    args[i] = None
    fn = getattr(ops, op)
    with pytest.raises(ValueError, match=msg):
        fn(*args)
    with FakeTensorMode() as mode:
        fake = [None if a is None else mode.from_tensor(a) for a in args]
        with pytest.raises(ValueError, match=msg):
            fn(*fake)
    meta = [None if a is None else a.detach().to("meta") for a in args]
    with pytest.raises(ValueError, match=msg):
        fn(*meta)
    if op == "rope_matrix":
        from npu_ops_transformer_ext import twin

        with pytest.raises(ValueError, match=msg):
            twin.run(*[None if a is None else a.detach() for a in args])


def test_different_devices():
    y_meta = torch.empty(D, D, device="meta", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"mat must be on x's device cpu, got meta; pass mat.to\(x.device\)"):
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


@pytest.mark.parametrize(
    "s, block",
    [
        (8, 0),  # 96 KiB of fp32: torch's own allocator
        (21, 0),  # 252 KiB: still under the cache's 256 KiB threshold
        (22, 320 << 10),  # 264 KiB: the cache, rounded up to 64 KiB multiples
        (64, 768 << 10),  # 768 KiB: a multiple of 64 KiB already
        (170, 2 << 20),  # 2,088,960 bytes: 32 blocks of 64 KiB
        (180, 4 << 20),  # 2,211,840 bytes, over 2 MiB: whole 2 MiB (huge) pages
    ],
)
def test_output_cache_takes_outputs_from_256_kib(monkeypatch, s, block):
    monkeypatch.delenv("NPU_OPS_CPU_OUTPUT_CACHE_MB", raising=False)
    x = torch.randn(1, 24, s, 128)
    sin, cos = torch.randn(2, s, 128).unbind(0)
    y = mode_matrix("half", [128])
    out = ops.rope_matrix(x, y, sin, cos)
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    held = ops._cpu_output_cache_bytes()
    del out  # back to the cache (or to torch's allocator)
    assert ops._cpu_output_cache_bytes() - held == block
    # The cache off: a freed output is given back, and so is everything the cache held.
    monkeypatch.setenv("NPU_OPS_CPU_OUTPUT_CACHE_MB", "0")
    out = ops.rope_matrix(x, y, sin, cos)
    del out
    assert ops._cpu_output_cache_bytes() == 0


def test_output_cache_keeps_every_output_of_a_call_above_its_cap():
    # In a fresh process (the floor a call sets lasts for the process): a cap of 1 MiB, q and k
    # outputs of 768 KiB each (1.5 MiB together). Both are reused by the next call, and the
    # cache holds both when they are freed; without the floor it would keep one of them.
    script = textwrap.dedent("""
        import json, torch
        import npu_ops_transformer_ext
        from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference
        ops = torch.ops.npu_ops_transformer_ext
        g = torch.Generator().manual_seed(0)
        q, k = torch.randn(2, 1, 24, 64, 128, generator=g).unbind(0)
        sin, cos = torch.randn(2, 64, 128, generator=g).unbind(0)
        y = mode_matrix("half", [128])
        seen = []
        for _ in range(3):
            qo, ko = ops.rope_matrix_qk(q, k, y, sin, cos)
            ok = torch.equal(qo, rope_matrix_reference(q, y, sin, cos)) and torch.equal(ko, rope_matrix_reference(k, y, sin, cos))
            seen.append(sorted([qo.data_ptr(), ko.data_ptr()]))
            del qo, ko
        print(json.dumps({"ok": ok, "seen": seen, "held": ops._cpu_output_cache_bytes()}))
    """)
    stdout = run_python(script, env=fresh_env(NPU_OPS_CPU_OUTPUT_CACHE_MB="1"), timeout=120)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["ok"]
    assert out["seen"][1] == out["seen"][0] and out["seen"][2] == out["seen"][0]
    assert out["held"] == 2 * (768 << 10)


def test_output_cache_never_keeps_an_output_larger_than_its_cap():
    # A fresh process with a 1 MiB cap: a 1.5 MiB output is given back to the OS when freed, and
    # does not raise the floor for the 768 KiB outputs after it (one of two kept, as under the cap).
    script = textwrap.dedent("""
        import json, torch
        import npu_ops_transformer_ext
        from npu_ops_transformer_ext.reference import mode_matrix
        ops = torch.ops.npu_ops_transformer_ext
        y = mode_matrix("half", [128])
        big = torch.randn(1, 24, 128, 128)
        out = ops.rope_matrix(big, y, torch.randn(128, 128), torch.randn(128, 128))
        del out
        after_big = ops._cpu_output_cache_bytes()
        a = torch.randn(1, 24, 64, 128)
        outs = [ops.rope_matrix(a, y, torch.randn(64, 128), torch.randn(64, 128)) for _ in range(2)]
        del outs
        print(json.dumps({"after_big": after_big, "held": ops._cpu_output_cache_bytes()}))
    """)
    stdout = run_python(script, env=fresh_env(NPU_OPS_CPU_OUTPUT_CACHE_MB="1"), timeout=120)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out == {"after_big": 0, "held": 768 << 10}


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


# ---- dtype rules: float64 tables, any-dtype exact matrices ------------------------------------

X_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _fp64_tables(s=7, d=64, seed=5):
    # Angles as Wan / diffusers build them: float64 cos/sin of float64 positions * frequencies.
    pos = torch.arange(s, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.cat([pos * inv, pos * inv], dim=-1)
    return ang.sin(), ang.cos()


@pytest.mark.parametrize("dtype", X_DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_float64_tables_are_rounded_to_float32_once(dtype, compiled):
    # The rule: a float64 table with a non-float64 x gives the bits of table.float() (nearest even).
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 7, 64, generator=g).to(dtype)
    sin, cos = _fp64_tables()
    mat = ext.get_half_matrix(64)
    f = ext.rope_matrix
    if compiled:
        torch._dynamo.reset()
        f = torch.compile(ext.rope_matrix, fullgraph=True)
    out = f(x, mat, sin, cos)
    assert torch.equal(out, ext.rope_matrix(x, mat, sin.float(), cos.float()))
    torch.testing.assert_close(out, rope_matrix_reference(x, mat, sin, cos), rtol=0, atol=0)
    # One table float64, the other x.dtype; and the fused q/k and in-place variants.
    assert torch.equal(f(x, mat, sin, cos.to(dtype)), ext.rope_matrix(x, mat, sin.float(), cos.to(dtype)))
    qo, ko = ext.rope_matrix_qk(x, x[:, :1], mat, sin, cos)
    assert torch.equal(qo, out) and torch.equal(ko, out[:, :1])
    xi = x.clone()
    ext.rope_matrix_(xi, mat, sin, cos)
    assert torch.equal(xi, out)


@pytest.mark.parametrize("table_dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("compiled", [False, True])
def test_tables_of_any_floating_dtype_are_converted_to_float32(table_dtype, compiled):
    """sin and cos may have any floating dtype: a dtype other than x.dtype and float32 is converted
    to float32 once (exactly, from these narrower dtypes), eagerly and under torch.compile, also
    for tables built by the table builders in that dtype."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 7, 16, generator=g)
    sin, cos = (torch.randn(7, 16, generator=g).to(table_dtype) for _ in range(2))
    mat = ext.get_half_matrix(16)
    f = ext.rope_matrix
    if compiled:
        torch._dynamo.reset()
        f = torch.compile(ext.rope_matrix, fullgraph=True)
    want = ext.rope_matrix(x, mat, sin.float(), cos.float())
    assert torch.equal(f(x, mat, sin, cos), want)
    torch.testing.assert_close(want, rope_matrix_reference(x, mat, sin.float(), cos.float()), rtol=0, atol=0)
    t = ext.rope_1d(7, 16, dtype=table_dtype)
    assert torch.equal(f(x, t.mat, t.sin, t.cos), ext.rope_matrix(x, t.mat, t.sin.float(), t.cos.float()))


def test_float64_table_rounding_is_nearest_even_not_truncation():
    # A value halfway between two float32 neighbours rounds to the even one; truncation would not.
    x = torch.ones(2, 16)
    lo = torch.tensor(1.0, dtype=torch.float32)
    ulp = torch.nextafter(lo, torch.tensor(2.0)) - lo
    half_up = 1.0 + 1.5 * float(ulp)  # exactly between 1 + ulp and 1 + 2 ulp: rounds to 1 + 2 ulp
    cos = torch.full((16,), half_up, dtype=torch.float64)
    out = ext.rope_matrix(x, torch.zeros(16, 16), torch.zeros(16, dtype=torch.float64), cos)
    assert out[0, 0].item() == 1.0 + 2 * float(ulp)


def test_other_floating_tables_are_exact():
    # float16 tables with a bfloat16 x (and bfloat16 tables with float64 x) convert exactly.
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 32, generator=g).bfloat16()
    sin, cos = torch.randn(5, 32, generator=g).half(), torch.randn(5, 32, generator=g).half()
    mat = ext.get_interleave_matrix(32)
    assert torch.equal(ext.rope_matrix(x, mat, sin, cos), ext.rope_matrix(x, mat, sin.float(), cos.float()))
    x64 = x.double()
    out = ext.rope_matrix(x64, mat, sin.bfloat16(), cos.bfloat16())
    torch.testing.assert_close(out, rope_matrix_reference(x64, mat, sin.bfloat16(), cos.bfloat16()), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", X_DTYPES + [torch.float64])
@pytest.mark.parametrize("mat_dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int64])
def test_exact_matrix_in_any_dtype(dtype, mat_dtype):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 5, 64, generator=g).to(dtype)
    sin, cos = torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g)
    mat_x = ext.get_quarter_matrix(64, dtype=dtype)
    mat = mat_x.to(mat_dtype)
    expected = ext.rope_matrix(x, mat_x, sin, cos)
    assert torch.equal(ext.rope_matrix(x, mat, sin, cos), expected)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(ext.rope_matrix, fullgraph=True)(x, mat, sin, cos), expected)


def test_dense_matrix_in_another_dtype_must_be_exact():
    x = torch.randn(2, 4, 32).bfloat16()
    t = torch.randn(4, 32)
    exact = (torch.randn(32, 32) * 4).round() / 4  # quarters: exact in bfloat16
    assert torch.equal(ext.rope_matrix(x, exact.double(), t, t), ext.rope_matrix(x, exact.bfloat16(), t, t))
    third = torch.full((32, 32), 1.0 / 3.0, dtype=torch.float64)
    with pytest.raises(
        ValueError,
        match=r"mat has dtype torch.float64 and entries that torch.bfloat16 \(x.dtype\) cannot hold exactly, "
        r"e.g. mat\[0, 0\] = 0.333.*; pass mat.to\(x.dtype\) to round them once, or \(on the CPU only: "
        r"the NPU multiplies in x.dtype\) mat.float\(\) to keep them$",
    ):
        ext.rope_matrix(x, third, t, t)
    # Both ways out that the message names work on the CPU; mat.float() keeps the third unrounded
    # (4096 outputs, seeded: some of them round differently with the rounded third).
    g = torch.Generator().manual_seed(11)
    xs, ts = torch.randn(2, 64, 32, generator=g).bfloat16(), torch.randn(64, 32, generator=g)
    kept = ext.rope_matrix(xs, third.float(), ts, ts)
    torch.testing.assert_close(kept, rope_matrix_reference(xs, third.float(), ts, ts), rtol=2**-7, atol=1e-5)
    assert not torch.equal(kept, ext.rope_matrix(xs, third.bfloat16(), ts, ts))
    with pytest.raises(ValueError, match=r"mat has dtype torch.int64 .*mat\[0, 0\] = 257"):
        ext.rope_matrix(x, torch.full((32, 32), 257), t, t)
    # The entry is printed in full, not to 6 digits (which would print 1.0000001 as "1"), with what
    # x.dtype makes of it.
    near = torch.eye(32, dtype=torch.float64)
    near[3, 3] = 1.0000001
    with pytest.raises(ValueError, match=r"mat\[3, 3\] = 1\.0000001000000001 \(1 in torch\.bfloat16\)"):
        ext.rope_matrix(x, near, t, t)
    big = torch.zeros(32, 32, dtype=torch.int64)
    big[0, 1] = 2**53 + 1
    with pytest.raises(ValueError, match=r"mat\[0, 1\] = 9007199254740993 \("):
        ext.rope_matrix(x.float().double(), big, t, t)


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mat_dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_matrix_beyond_x_range_is_refused(x_dtype, mat_dtype):
    """An integer entry beyond x.dtype's range rounds to Inf in x.dtype; Inf converted back to an
    integer type is undefined (the most negative integer on x86), so the round trip alone would
    let the most negative integer through. Every entry beyond the range is refused, eagerly and
    under torch.compile."""
    x = torch.arange(4, dtype=x_dtype).reshape(1, 4)
    t = torch.ones(4)
    info = torch.iinfo(mat_dtype)
    holds_all = x_dtype == torch.bfloat16 or info.bits <= 16  # float16 tops out at 65504
    for value in (info.min, info.max, -(2**15) - 1 if info.bits > 16 else info.min):
        mat = torch.eye(4, dtype=mat_dtype)
        mat[0, 0] = value
        exact = float(mat[0, 0].to(x_dtype)) == value
        for fn in (ext.rope_matrix, torch.compile(ext.rope_matrix, fullgraph=True)):
            torch._dynamo.reset()
            if exact:
                out = fn(x, mat, t, t)
                assert torch.equal(out, ext.rope_matrix(x, mat.to(x_dtype), t, t))
            else:
                with pytest.raises(Exception, match=r"mat has dtype .* cannot hold exactly, e.g. mat\[0, 0\]"):
                    fn(x, mat, t, t)
    if not holds_all:
        # the case that slipped through: the most negative integer with float16 x
        mat = torch.eye(4, dtype=mat_dtype)
        mat[0, 0] = info.min
        with pytest.raises(ValueError, match=r"mat\[0, 0\] = -"):
            ext.rope_matrix(x, mat, t, t)


@pytest.mark.parametrize("build", ["get_half_matrix", "get_interleave_matrix", "get_quarter_matrix",
                                   "get_interleave_half_matrix"])
def test_builders_check_n_and_dtype(build):
    import numpy as np

    fn = getattr(ext, build)
    want = fn(8)
    # Any integral n: NumPy integers and 0-dim integer tensors are as good as int.
    for n in (np.int64(8), torch.tensor(8), np.int32(8)):
        assert torch.equal(fn(n), want)
    for n in (8.0, "8", None, True):
        with pytest.raises(TypeError, match=f"{build}: n must be an integer, got"):
            fn(n)
    with pytest.raises(ValueError, match=f"{build}: n must be a positive multiple of"):
        fn(-4)
    # A dtype that cannot hold -1 would silently build another matrix (uint8: -1 -> 255).
    for dtype in (torch.uint8, torch.bool, torch.complex64, torch.float8_e8m0fnu):
        with pytest.raises(TypeError, match=f"{build}: dtype must be a real dtype that holds -1.*got {dtype}"):
            fn(8, dtype=dtype)
    # float8 has no neg on the CPU: the builders must not need it.
    float8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
    x = torch.randn(3, 8).bfloat16()
    sin, cos = torch.randn(3, 8), torch.randn(3, 8)
    for dtype in (torch.int8, torch.int64, torch.float16, torch.bfloat16, torch.float64) + float8:
        m = fn(8, dtype=dtype)
        assert m.dtype == dtype and torch.equal(m.float(), want)
        assert ext.is_signed_permutation(m)
        assert torch.equal(ext.rope_matrix(x, m, sin, cos), ext.rope_matrix(x, want, sin, cos))


def test_builders_agree_on_default_dtypes():
    from npu_ops_transformer_ext.tables import rope_1d

    tab = rope_1d(8, 64)
    for build in (ext.get_half_matrix, ext.get_interleave_matrix, ext.get_quarter_matrix, ext.get_interleave_half_matrix):
        assert build(64).dtype == tab.mat.dtype == tab.cos.dtype == tab.sin.dtype == torch.float32
    # So the defaults work with every x dtype.
    for dtype in X_DTYPES + [torch.float64]:
        x = torch.randn(8, 64).to(dtype)
        torch.testing.assert_close(ext.rope_matrix(x, ext.get_half_matrix(64), tab.sin, tab.cos),
                                   rope_matrix_reference(x, ext.get_half_matrix(64), tab.sin, tab.cos), rtol=0, atol=0)


def test_float64_tables_and_matrix_under_autograd():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 7, 64, generator=g).bfloat16().requires_grad_()
    sin, cos = (t.requires_grad_() for t in _fp64_tables())
    mat = ext.get_half_matrix(64, dtype=torch.float64)
    ext.rope_matrix(x, mat, sin, cos).float().square().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and sin.grad.dtype == cos.grad.dtype == torch.float64
    x2 = x.detach().clone().requires_grad_()
    s2, c2 = (t.detach().float().requires_grad_() for t in (sin, cos))
    ext.rope_matrix(x2, mat.float(), s2, c2).float().square().sum().backward()
    assert torch.equal(x.grad, x2.grad)
    torch.testing.assert_close(sin.grad.float(), s2.grad, rtol=0, atol=0)


def test_expanded_float64_table_is_converted_without_materializing():
    x = torch.randn(4, 6, 9, 64).bfloat16()
    s, c = _fp64_tables(9, 64)
    sin, cos = s.expand(4, 6, 9, 64), c[None, None].expand(4, 6, 9, 64)
    assert torch.equal(ext.rope_matrix(x, ext.get_half_matrix(64), sin, cos),
                       ext.rope_matrix(x, ext.get_half_matrix(64), s.float(), c.float()))


@pytest.mark.parametrize("dtype_name", ["bits8", "bits16", "uint1", "int4", "float4_e2m1fn_x2"])
@pytest.mark.parametrize("arg", ["mat", "sin"])
def test_exotic_dtypes_refused_alike_by_the_op_and_its_fake(dtype_name, arg):
    """Dtypes that are neither a floating dtype that converts to float32 nor one of c10's integer
    dtypes: the op and its fake kernel both refuse them with a TypeError (the fake took them)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtype = getattr(torch, dtype_name, None)
    if dtype is None:
        pytest.skip(f"torch has no {dtype_name}")
    x, s = torch.randn(2, 5, 8), torch.randn(5, 8)
    args = {"x": x, "mat": ext.get_half_matrix(8), "sin": s, "cos": s}
    args[arg] = torch.empty((8, 8) if arg == "mat" else (5, 8), dtype=dtype)
    ops = torch.ops.npu_ops_transformer_ext
    with pytest.raises(TypeError, match=arg):
        ops.rope_matrix(args["x"], args["mat"], args["sin"], args["cos"])
    with FakeTensorMode() as mode, pytest.raises(TypeError, match=arg):
        fake = {k: mode.from_tensor(v) for k, v in args.items()}
        ops.rope_matrix(fake["x"], fake["mat"], fake["sin"], fake["cos"])


def test_output_cache_floor_is_bounded_by_a_lowered_cap():
    # A fresh process: a 4 MiB cap, one rope_matrix_qk call with two 3 MiB outputs (the floor: two 4
    # MiB blocks), then the cap lowered to 1 MiB at run time: freed buffers are kept only up to twice
    # the new cap (the floor used to keep the old 6 MiB).
    script = textwrap.dedent("""
        import json, os, torch
        import npu_ops_transformer_ext
        from npu_ops_transformer_ext.reference import mode_matrix
        ops = torch.ops.npu_ops_transformer_ext
        y = mode_matrix("half", [128])
        q = torch.randn(1, 24, 256, 128)
        t = torch.randn(256, 128)
        qo, ko = ops.rope_matrix_qk(q, q, y, t, t)
        del qo, ko
        before = ops._cpu_output_cache_bytes()
        os.environ["NPU_OPS_CPU_OUTPUT_CACHE_MB"] = "1"
        a = torch.randn(1, 8, 64, 128)  # 256 KiB outputs
        outs = [ops.rope_matrix(a, y, t[:64], t[:64]) for _ in range(12)]
        del outs
        print(json.dumps({"before": before, "held": ops._cpu_output_cache_bytes()}))
    """)
    stdout = run_python(script, env=fresh_env(NPU_OPS_CPU_OUTPUT_CACHE_MB="4"), timeout=120)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["before"] == 2 * (4 << 20)  # each 3 MiB output in a 4 MiB huge-page block
    assert out["held"] <= 2 << 20


def test_resizing_a_cached_output_ignores_the_cache_setting(monkeypatch):
    # A returned output's storage keeps the cache's allocator: resizing it later must not fail on
    # an (unrelated) invalid NPU_OPS_CPU_OUTPUT_CACHE_MB, which only the op's own calls refuse.
    y = mode_matrix("half", [128])
    x = torch.randn(1, 24, 64, 128)
    t = torch.randn(64, 128)
    out = ops.rope_matrix(x, y, t, t)
    monkeypatch.setenv("NPU_OPS_CPU_OUTPUT_CACHE_MB", "lots")
    out.resize_(2 * out.numel())
    assert out.numel() == 2 * x.numel()
    with pytest.raises(ValueError, match="NPU_OPS_CPU_OUTPUT_CACHE_MB"):
        ops.rope_matrix(x, y, t, t)


def test_a_large_call_leaves_little_memory_to_its_threads():
    # A fresh process, output cache off: x [2^23, 2] bf16 with [D] tables has 2^23 broadcast
    # positions (24 bytes each, which each thread used to keep for its life), and a bf16 D = 8192
    # streamed call's table blocks (64 MiB per thread). After the calls and their outputs are gone,
    # RSS is back within 48 MiB of where it was. glibc's mmap threshold is fixed at its initial
    # 128 KiB: by default the first large free raises it, and the heap then keeps freed blocks
    # (about 49 MiB here in some runs under load, depending on which thread freed first), which is
    # the C library's caching, not memory the op holds.
    script = textwrap.dedent("""
        import json, os, torch
        import npu_ops_transformer_ext
        from npu_ops_transformer_ext.reference import mode_matrix
        ops = torch.ops.npu_ops_transformer_ext
        page = os.sysconf("SC_PAGE_SIZE")
        rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
        x = torch.randn(1 << 23, 2).bfloat16()
        y = mode_matrix("half", [2], dtype=torch.bfloat16)
        t = torch.randn(2)
        big = torch.randn(1, 2, 2048, 8192).bfloat16()
        yb = mode_matrix("half", [8192])
        tb = torch.randn(2048, 8192)
        ops.rope_matrix(x[:4], y, t, t)
        base = rss()
        out = ops.rope_matrix(x, y, t, t)
        del out
        out = ops.rope_matrix(big, yb, tb, tb)
        del out
        print(json.dumps({"retained": rss() - base}))
    """)
    env = fresh_env(NPU_OPS_CPU_OUTPUT_CACHE_MB="0", MALLOC_MMAP_THRESHOLD_="131072")
    stdout = run_python(script, env=env, timeout=300)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["retained"] < 48 << 20, out
