"""rope_matrix_ (in place): which x it takes, and the reason it gives when it refuses one.

The rule: x may have any layout that does not overlap itself (packed-QKV views, strided slices,
transposes), and must share no memory with mat, sin or cos; the tables and the matrix are only read,
so they may be expanded or overlap themselves. Results equal the out-of-place op bit for bit.
"""
import npu_ops_transformer_ext as ext
import pytest
import torch
from npu_ops_transformer_ext import get_half_matrix, get_interleave_matrix
from npu_ops_transformer_ext.reference import rope_matrix_reference

ops = torch.ops.npu_ops_transformer_ext


def _tables(s, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(s, d, generator=g).to(dtype), torch.randn(s, d, generator=g).to(dtype)


def _check_inplace(x, mat, sin, cos):
    """Runs rope_matrix_ on x and checks it against the out-of-place op (bit for bit) and the
    reference (bit for bit for a signed permutation; a dense mat's sum order is not specified)."""
    expected = ops.rope_matrix(x, mat, sin, cos)
    exact = ext.is_signed_permutation(mat)
    tol = {} if not exact else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(expected, rope_matrix_reference(x, mat, sin, cos), **tol)
    ptr, strides = x.data_ptr(), x.stride()
    assert ext.rope_matrix_(x, mat, sin, cos) is None
    assert x.data_ptr() == ptr and x.stride() == strides
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["bsnd", "bnsd"])
def test_packed_qkv_in_place(dtype, layout):
    # qkv [B, S, 3, H, D] (one projection, split by views): q, k, v are views with gaps between
    # their rows. Rotating q and k in place must equal the out-of-place op and leave v untouched.
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(2, 16, 3, 4, 64, generator=g).to(dtype)
    before = qkv.clone()
    mat = get_half_matrix(64, dtype=dtype)
    sin, cos = _tables(16, 64)
    if layout == "bsnd":
        sin, cos = sin[:, None], cos[:, None]  # [S, 1, D]
    views = [qkv[:, :, i] for i in range(2)]  # [B, S, H, D]
    if layout == "bnsd":
        views = [v.transpose(1, 2) for v in views]  # [B, H, S, D] views of the same memory
    expected = [ops.rope_matrix(v, mat, sin, cos) for v in views]
    for v in views:
        ext.rope_matrix_(v, mat, sin, cos)
    for v, e in zip(views, expected):
        torch.testing.assert_close(v, e, rtol=0, atol=0)
    assert torch.equal(qkv[:, :, 2], before[:, :, 2])  # v untouched
    # The whole row block: q and k written, nothing else.
    q_ref = rope_matrix_reference(before[:, :, 0].transpose(1, 2) if layout == "bnsd" else before[:, :, 0], mat, sin, cos)
    torch.testing.assert_close(views[0], q_ref, rtol=0, atol=0)


def test_packed_qkv_last_dim_split():
    # Fused projections often pack q, k, v along the last dim: [B, S, 3 * H * D] split with views.
    g = torch.Generator().manual_seed(2)
    H, D = 4, 32
    qkv = torch.randn(2, 9, 3 * H * D, generator=g).bfloat16()
    before = qkv.clone()
    q, k, v = qkv.view(2, 9, 3, H, D).unbind(2)
    mat = get_interleave_matrix(D)
    sin, cos = _tables(9, D)
    sin, cos = sin[:, None], cos[:, None]
    _check_inplace(q, mat, sin, cos)
    _check_inplace(k, mat, sin, cos)
    assert torch.equal(v, before.view(2, 9, 3, H, D)[:, :, 2])


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda t: t[:, ::2], id="every-other-row"),
        pytest.param(lambda t: t[::3, 1::2], id="step-3-and-2"),
        pytest.param(lambda t: t[:, :, :, :64], id="first-half-of-D"),  # D of a wider row
        pytest.param(lambda t: t.transpose(0, 2)[:, :, ::2], id="transposed-strided"),
        pytest.param(lambda t: t[..., :64].transpose(-1, -2).contiguous().transpose(-1, -2), id="D-not-unit-stride"),
    ],
)
def test_strided_slices(make):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 8, 5, 128, generator=g).bfloat16()
    x = make(base)
    if x.size(-1) != 64:
        x = x[..., :64]
    before_base = base.clone()
    mat = get_half_matrix(64)
    sin, cos = _tables(x.size(-2), 64, torch.bfloat16)
    _check_inplace(x, mat, sin, cos)
    # Everything of base outside x is untouched.
    if x._base is base or x.untyped_storage().data_ptr() == base.untyped_storage().data_ptr():
        mask = torch.ones_like(base, dtype=torch.bool)
        make_mask = make(mask)
        if make_mask.size(-1) != 64:
            make_mask = make_mask[..., :64]
        if make_mask.untyped_storage().data_ptr() == mask.untyped_storage().data_ptr():
            make_mask.fill_(False)
            assert torch.equal(base[mask], before_base[mask])


def test_interleaved_strides_that_do_not_overlap():
    # Sizes (3, 2) with element strides (2, 3): offsets {0, 2, 4, 3, 5, 7} are distinct although no
    # stride exceeds the span of the other (torch's own check answers "too hard" here).
    storage = torch.randn(8 * 64).bfloat16()
    x = storage.as_strided((3, 2, 64), (2 * 64, 3 * 64, 1))
    mat = get_half_matrix(64)
    sin, cos = _tables(2, 64)
    _check_inplace(x, mat, sin, cos)


def test_expanded_tables_and_matrix():
    # Tables broadcast with expand (stride 0) and a matrix that is an expanded view are only read.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 7, 64, generator=g).bfloat16()
    s, c = _tables(7, 64)
    sin = s.expand(2, 3, 7, 64)
    cos = c[:, None].expand(7, 3, 64).transpose(0, 1).expand(2, 3, 7, 64)  # any strides
    _check_inplace(x, get_half_matrix(64), sin, cos)
    one = torch.ones(1, 64).expand(64, 64)  # a [D, D] view of one row: dense mat, stride 0
    _check_inplace(torch.randn(4, 64, generator=g), one / 64, s[:4], c[:4])


def test_tables_from_the_same_buffer_as_x_but_disjoint():
    # x, sin and cos are interleaved views of one buffer with no byte in common: accepted.
    buf = torch.randn(5, 3, 64)
    x, sin, cos = buf.unbind(1)
    sin_c, cos_c = sin.clone(), cos.clone()
    _check_inplace(x, get_half_matrix(64, dtype=torch.float32), sin, cos)
    assert torch.equal(sin, sin_c) and torch.equal(cos, cos_c)


# ---- refusals, each with its true reason --------------------------------------------------------


def test_refuses_x_that_overlaps_itself():
    mat = get_half_matrix(64)
    sin, cos = _tables(4, 64)
    x = torch.randn(1, 64).bfloat16().expand(4, 64)
    with pytest.raises(ValueError, match=r"x overlaps itself .*use the out-of-place rope_matrix"):
        ext.rope_matrix_(x, mat, sin, cos)
    # No zero stride, still overlapping: rows 1 element apart.
    storage = torch.randn(128).bfloat16()
    x = storage.as_strided((4, 64), (1, 1))
    with pytest.raises(ValueError, match="x overlaps itself"):
        ext.rope_matrix_(x, mat, sin, cos)
    # Strides (2, 3) with sizes (4, 3): 3*2 + 0*3 == 0*2 + 2*3 -> the same element twice.
    x = torch.randn(16 * 64).bfloat16().as_strided((4, 3, 64), (2 * 64, 3 * 64, 1))
    with pytest.raises(ValueError, match="x overlaps itself"):
        ext.rope_matrix_(x, mat, _tables(3, 64)[0], _tables(3, 64)[1])
    # 268M elements in a span of 197K: decided by counting, without listing them.
    x = torch.zeros(4096 * 48 + 16).bfloat16().as_strided((4097, 4097, 16), (32, 16, 1))
    with pytest.raises(ValueError, match="x overlaps itself"):
        ext.rope_matrix_(x, torch.zeros(16, 16), torch.zeros(16), torch.ones(16))


@pytest.mark.parametrize("name", ["mat", "sin", "cos"])
def test_refuses_x_sharing_memory_with(name):
    buf = torch.randn(4 * 64 + 64 * 64)
    x = buf[: 4 * 64].view(4, 64)
    args = {"mat": get_half_matrix(64, dtype=torch.float32), "sin": _tables(4, 64)[0], "cos": _tables(4, 64)[1]}
    if name == "mat":
        args["mat"] = buf[64 * 3 : 64 * 3 + 64 * 64].view(64, 64)  # starts inside x's last row
    else:
        args[name] = buf[64:].view(-1, 64)[:4]  # rows 1..3 of x and one more
    before = x.clone()
    with pytest.raises(ValueError, match=rf"x shares memory with {name} .*pass {name}.clone\(\)"):
        ext.rope_matrix_(x, args["mat"], args["sin"], args["cos"])
    assert torch.equal(x, before)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("name", ["mat", "sin", "cos"])
def test_compiled_refuses_x_sharing_memory_with(name, backend):
    """Under torch.compile the fake kernel makes the same check on the traced views (a backend that
    functionalizes the mutation never runs the eager check), and nothing is written; views of one
    buffer with no byte in common are still taken, with the eager bits."""
    buf = torch.randn(4 * 64 + 64 * 64)
    x = buf[: 4 * 64].view(4, 64)
    args = {"mat": get_half_matrix(64, dtype=torch.float32), "sin": _tables(4, 64)[0], "cos": _tables(4, 64)[1]}
    if name == "mat":
        args["mat"] = buf[64 * 3 : 64 * 3 + 64 * 64].view(64, 64)
    else:
        args[name] = buf[64:].view(-1, 64)[:4]

    def f(x, mat, sin, cos):
        ext.rope_matrix_(x, mat, sin, cos)
        return x

    before = buf.clone()
    torch._dynamo.reset()
    with pytest.raises(Exception, match=rf"x shares memory with {name} .*pass {name}.clone\(\)"):
        torch.compile(f, backend=backend, fullgraph=True)(x, args["mat"], args["sin"], args["cos"])
    assert torch.equal(buf, before)
    # disjoint views of one buffer: taken
    buf = torch.randn(5, 3, 64)
    x, sin, cos = buf.unbind(1)
    want = ops.rope_matrix(x, get_half_matrix(64), sin, cos)
    torch._dynamo.reset()
    torch.compile(f, backend=backend, fullgraph=True)(x, get_half_matrix(64), sin, cos)
    assert torch.equal(x, want)


def test_refuses_interleaved_views_that_share_one_element():
    # x = buf[:, 0] and sin = buf[:, ::2] interleave; they share element column 0 of each row.
    buf = torch.randn(4, 2, 64)
    x = buf[:, 0]
    sin = buf.view(4, 128)[:, 32:96]  # the last half of x's row and the first of the next block
    with pytest.raises(ValueError, match="x shares memory with sin"):
        ext.rope_matrix_(x, get_half_matrix(64, dtype=torch.float32), sin, torch.ones(64))
    # The same shapes one element further: no byte in common -> accepted.
    sin_ok = buf.view(4, 128)[:, 64:128]
    _check_inplace(x, get_half_matrix(64, dtype=torch.float32), sin_ok, torch.ones(64))


def test_refuses_the_same_tensor_as_table():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="x shares memory with cos"):
        ext.rope_matrix_(x, get_half_matrix(64, dtype=torch.float32), torch.ones(64), x)


# ---- autograd rules and torch.compile -----------------------------------------------------------


def test_view_of_leaf_requiring_grad_is_refused():
    qkv = torch.randn(1, 4, 3, 2, 64, requires_grad=True)
    sin, cos = _tables(4, 64)
    with pytest.raises(RuntimeError, match="x requires grad"):
        ext.rope_matrix_(qkv[:, :, 0], get_half_matrix(64, dtype=torch.float32), sin[:, None], cos[:, None])


def test_in_place_bumps_the_version_of_the_packed_buffer():
    # A graph that saved qkv before q was rotated in place fails at backward instead of computing
    # a wrong gradient (the view shares qkv's version counter).
    w = torch.randn(4, 2, 64, requires_grad=True)
    qkv = w * 2
    y = (qkv * qkv).sum()  # saves qkv
    q = qkv.detach()[:, 0]
    v0 = qkv._version
    sin, cos = _tables(4, 64)
    ext.rope_matrix_(q, get_half_matrix(64, dtype=torch.float32), sin, cos)
    assert qkv._version > v0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_in_place_in_inference_mode_on_packed_qkv():
    with torch.inference_mode():
        qkv = torch.randn(2, 8, 3, 2, 64).bfloat16()
        q = qkv[:, :, 0]
        expected = ops.rope_matrix(q, get_half_matrix(64), *(t[:, None] for t in _tables(8, 64)))
        ext.rope_matrix_(q, get_half_matrix(64), *(t[:, None] for t in _tables(8, 64)))
        torch.testing.assert_close(q, expected, rtol=0, atol=0)


def test_compiled_in_place_on_packed_qkv():
    mat = get_half_matrix(64)
    sin, cos = (t[:, None] for t in _tables(8, 64))

    def f(qkv):
        q, k, _ = qkv.unbind(2)
        ext.rope_matrix_(q, mat, sin, cos)
        ext.rope_matrix_(k, mat, sin, cos)
        return qkv

    qkv = torch.randn(2, 8, 3, 2, 64).bfloat16()
    expected = f(qkv.clone())
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(qkv.clone())
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_empty_x_with_zero_strides_is_taken(dtype):
    """An empty x has no two elements that share memory, expanded or not (torch's own in-place
    ops take it): rope_matrix_ takes it eagerly, in the fake kernel and under torch.compile, writes
    nothing, and still bumps x's version. Its out-of-place twin is empty too."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mat = get_half_matrix(4)
    ones = torch.ones(4)
    views = [
        torch.empty(1, 0, 4, dtype=dtype).expand(2, 0, 4),
        torch.empty(0, 1, 4, dtype=dtype).expand(0, 3, 4),
        torch.empty(0, 4, dtype=dtype).as_strided((0, 5, 4), (0, 0, 1)),
    ]
    for x in views:
        x.add_(1)  # torch's own in-place op takes it
        version = x._version
        assert ext.rope_matrix_(x, mat, ones, ones) is None
        assert x._version == version + 1
        assert ops.rope_matrix(x, mat, ones, ones).shape == x.shape
        with FakeTensorMode() as mode:
            ops.rope_matrix_(mode.from_tensor(x), *(mode.from_tensor(t) for t in (mat, ones, ones)))

        def f(t):
            ops.rope_matrix_(t, mat, ones, ones)
            return t

        torch._dynamo.reset()
        assert torch.compile(f, fullgraph=True)(x).shape == x.shape


def test_fake_kernel_refuses_like_eager():
    from torch._subclasses.fake_tensor import FakeTensorMode

    mat = get_half_matrix(64)
    sin, cos = _tables(4, 64)
    x = torch.randn(1, 64).bfloat16().expand(4, 64)
    with FakeTensorMode() as mode:
        fx, fm, fs, fc = (mode.from_tensor(t) for t in (x, mat, sin, cos))
        with pytest.raises(ValueError, match="x overlaps itself"):
            ops.rope_matrix_(fx, fm, fs, fc)
        q = mode.from_tensor(torch.randn(2, 4, 3, 64).bfloat16())[:, :, 0]
        ops.rope_matrix_(q, fm, fs, fc)  # a packed view is fine


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_inplace_refuses_expanded_x_with_the_ops_message(dynamic):
    # Under dynamic shapes the sizes are symbolic, but a symbolic size is >= 2, so an expanded dim
    # (stride 0) still tells the fake kernel that x overlaps itself: the op's message, not torch's
    # copy-back error from the compiled graph.
    mat = get_half_matrix(8)
    sin, cos = _tables(6, 8)

    def f(x):
        ops.rope_matrix_(x, mat, sin, cos)
        return x

    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True, dynamic=dynamic)
    x = torch.randn(1, 2, 6, 8).expand(3, 2, 6, 8)
    with pytest.raises(Exception, match="rope_matrix_: x overlaps itself"):
        g(x)
    ok = torch.randn(3, 2, 6, 8)
    want = ops.rope_matrix(ok, mat, sin, cos)
    assert torch.equal(g(ok), want)


def test_fake_overlap_check_leaves_an_unbacked_size_that_may_be_zero_to_eager():
    # An unbacked size may be 0 (no elements: nothing overlaps), so an expanded dim beside it does
    # not decide; a size known to be >= 1 lets it decide.
    from npu_ops_transformer_ext.ops import _overlaps_itself
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    with FakeTensorMode(shape_env=env):
        u = env.create_unbacked_symint()
        torch._check(u >= 0)
        assert _overlaps_itself(torch.empty(u, 1, 16).expand(u, 4, 16)) is None
        v = env.create_unbacked_symint()
        torch._check(v >= 1)
        assert _overlaps_itself(torch.empty(v, 1, 16).expand(v, 4, 16)) is True
    assert _overlaps_itself(torch.empty(0, 1, 16).expand(0, 4, 16)) is False


def test_inference_tensor_outside_inference_mode_is_refused_untouched():
    # As torch's own in-place ops: an inference tensor has no version counter to bump.
    sin, cos = _tables(8, 64)
    with torch.inference_mode():
        x = torch.randn(2, 8, 64)
    before = x.clone()
    with pytest.raises(RuntimeError, match=r"rope_matrix_: x is an inference tensor .*torch.inference_mode\(\)"):
        ext.rope_matrix_(x, get_half_matrix(64), sin, cos)
    assert torch.equal(x, before)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:  # the fake kernel says the same while tracing
        fx = mode.from_tensor(x)
        with pytest.raises(RuntimeError, match="rope_matrix_: x is an inference tensor"):
            ops.rope_matrix_(fx, mode.from_tensor(get_half_matrix(64)), mode.from_tensor(sin), mode.from_tensor(cos))


def test_normal_tensor_updated_in_inference_mode_bumps_its_version():
    """Inside torch.inference_mode() the Autograd kernel does not run; a normal (non-inference) x
    saved by a graph must still see its version bumped, as torch's mul_ bumps it, so backward
    refuses instead of using the overwritten values; and an x requiring grad is refused there too."""
    sin, cos = _tables(8, 64)
    mat = get_half_matrix(64)
    for name in ("op", "wrapper"):
        a = torch.randn(2, 8, 64, requires_grad=True)
        h = a * 2  # saved by the next op
        loss = (h * h).sum()
        x = h.detach()  # shares h's version counter
        v = x._version
        with torch.inference_mode():
            if name == "op":
                ops.rope_matrix_(x, mat, sin, cos)
            else:
                ext.rope_matrix_(x, mat, sin, cos)
        assert x._version > v and h._version > v
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    for x in (torch.randn(2, 8, 64, requires_grad=True), torch.randn(2, 8, 64, requires_grad=True) * 1):
        before = x.detach().clone()
        with torch.inference_mode(), pytest.raises(RuntimeError, match="rope_matrix_: x requires grad"):
            ops.rope_matrix_(x, mat, sin, cos)
        assert torch.equal(x.detach(), before)
    # an inference tensor inside inference mode: updated, no version counter involved
    with torch.inference_mode():
        x = torch.randn(2, 8, 64)
        want = rope_matrix_reference(x, mat, sin, cos)
        ops.rope_matrix_(x, mat, sin, cos)
        assert torch.equal(x, want)


def test_memory_shared_through_two_storage_objects_is_refused():
    """Two torch.from_numpy (or torch.frombuffer) calls over one buffer make two storage objects
    over the same bytes: the shared-memory rule is decided by address, not by storage identity
    (it used to accept, and x was written while sin's rows were still read). Separate buffers that
    are merely adjacent stay accepted."""
    import numpy as np

    s, d = 64, 64
    mat = get_half_matrix(d)
    buf = np.random.default_rng(0).standard_normal(8 * s * d).astype(np.float32)
    sin = torch.from_numpy(buf[: s * d]).view(s, d)
    cos = torch.randn(s, d)
    x = torch.from_numpy(buf[4 * d : 4 * d + 2 * s * d]).view(2, s, d)  # row r of x is row r+4 of sin
    assert x.untyped_storage()._cdata != sin.untyped_storage()._cdata  # two storage objects
    before = x.clone()
    with pytest.raises(ValueError, match="x shares memory with sin"):
        ops.rope_matrix_(x, mat, sin, cos)
    assert torch.equal(x, before)
    raw = bytearray(buf.tobytes())
    xb = torch.frombuffer(raw, dtype=torch.float32, offset=4 * d * 4, count=2 * s * d).view(2, s, d)
    cb = torch.frombuffer(raw, dtype=torch.float32, count=s * d).view(s, d)
    with pytest.raises(ValueError, match="x shares memory with cos"):
        ops.rope_matrix_(xb, mat, sin.clone(), cb)
    # adjacent, not overlapping: accepted, and the result is the reference's
    x2 = torch.from_numpy(buf[s * d : s * d + 2 * s * d]).view(2, s, d)
    want = rope_matrix_reference(x2.clone(), mat, sin.clone(), cos)
    ops.rope_matrix_(x2, mat, sin, cos)
    assert torch.equal(x2, want)


def _packed_qkv_in_place(qkv, mat, sin, cos):
    with torch.no_grad():
        ops.rope_matrix_(qkv[:, :, 0], mat, sin, cos)  # q: storage offset 0
        ops.rope_matrix_(qkv[:, :, 1], mat, sin, cos)  # k: storage offset H * D
    return qkv


# The Python function and the registered op: under torch.compile both reach the op's Functionalize
# kernel (rope_matrix_functionalize.cpp).
_IN_PLACE = pytest.mark.parametrize(
    "inplace", [ext.rope_matrix_, torch.ops.npu_ops_transformer_ext.rope_matrix_], ids=["python", "registered_op"]
)


@_IN_PLACE
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_inplace_updates_views_at_a_symbolic_storage_offset(backend, inplace):
    """Views made in the graph whose storage offset is symbolic: k = qkv[:, :, 1] with a dynamic
    head count, and qkv[1] of qkv [3, B, S, H, D] once a second length makes S dynamic. Each is
    updated at its own place with the eager bits (through auto_functionalized_v2, PyTorch 2.13's
    inductor rotated q's place twice and k never)."""
    mat = get_half_matrix(8)
    sin, cos = _tables(5, 8)
    sin, cos = sin[:, None], cos[:, None]  # BSND tables [S, 1, D]

    def packed(qkv):
        inplace(qkv[:, :, 0], mat, sin, cos)
        inplace(qkv[:, :, 1], mat, sin, cos)

    for how in ("dynamic=True", "mark_dynamic(H)"):
        torch._dynamo.reset()
        g = torch.compile(packed, fullgraph=True, backend=backend, dynamic=True if how == "dynamic=True" else None)
        for h in (2, 3):
            qkv = torch.randn(2, 5, 3, h, 8)
            want, got = qkv.clone(), qkv.clone()
            if how == "mark_dynamic(H)":
                torch._dynamo.mark_dynamic(got, 3)
            with torch.no_grad():
                packed(want)
            g(got)
            assert torch.equal(got, want) and not torch.equal(got[:, :, 1], qkv[:, :, 1]), (how, h)
            assert torch.equal(got[:, :, 2], qkv[:, :, 2])  # v untouched

    def leading(qkv, sn, cs):
        inplace(qkv[0], mat, sn, cs)
        inplace(qkv[1], mat, sn, cs)

    torch._dynamo.reset()
    g = torch.compile(leading, fullgraph=True, backend=backend)
    for s in (5, 7, 9):  # from the second length on, S and so qkv[1]'s offset are symbolic
        sn, cs = _tables(s, 8)
        orig = torch.randn(3, 2, s, 2, 8)
        x, want = orig.clone(), orig.clone()
        with torch.no_grad():
            leading(want, sn[:, None], cs[:, None])
        g(x, sn[:, None], cs[:, None])
        assert torch.equal(x, want) and not torch.equal(x[1], orig[1]) and torch.equal(x[2], orig[2]), s


def test_compiled_inplace_packed_qkv_with_a_dynamic_sequence_length():
    """The offsets stay numbers when only S is dynamic (a second length retraces with a symbolic S):
    inductor then updates q and k in place, each at its own place, with the eager bits."""
    mat = get_half_matrix(8)
    torch._dynamo.reset()
    g = torch.compile(_packed_qkv_in_place, fullgraph=True, backend="inductor")
    for s in (5, 7, 11):
        sin, cos = _tables(s, 8)
        qkv = torch.randn(2, s, 3, 2, 8)
        want = _packed_qkv_in_place(qkv.clone(), mat, sin[:, None], cos[:, None])
        got = qkv.clone()
        g(got, mat, sin[:, None], cos[:, None])  # from the second length on, S is symbolic
        assert torch.equal(got, want) and not torch.equal(got[:, :, 1], qkv[:, :, 1])


def test_compiled_inplace_takes_a_view_passed_in_at_any_offset():
    """A view made outside and passed in: once dynamo makes its sizes dynamic its offset is a symbol
    of its own, which inductor writes back correctly, so it is not refused (k = qkv[:, :, 1] at
    offsets 16, 24, 32 as the head count changes, and with only S changing)."""
    mat = get_half_matrix(8)

    def f(k, sin, cos):
        with torch.no_grad():
            ops.rope_matrix_(k.transpose(1, 2), mat, sin.transpose(0, 1), cos.transpose(0, 1))  # as BNSD

    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True, backend="inductor")
    for s, h in ((5, 2), (7, 2), (7, 3), (9, 4)):
        sin, cos = _tables(s, 8)
        sin, cos = sin[:, None], cos[:, None]
        qkv = torch.randn(2, s, 3, h, 8)
        want = qkv.clone()
        f(want[:, :, 1], sin, cos)
        got = qkv.clone()
        g(got[:, :, 1], sin, cos)
        assert torch.equal(got, want) and not torch.equal(got[:, :, 1], qkv[:, :, 1])


@_IN_PLACE
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_inplace_updates_views_of_an_input_with_a_storage_offset(backend, dynamic, inplace):
    """rope_matrix_ under torch.compile on a view made in the graph of an input that itself has a
    storage offset: the eager bits at the view's own elements, nothing else written. (Through
    auto_functionalized_v2, PyTorch 2.13 wrote x[0:1] of an input base[1:3] into base[2].)"""
    mat = get_half_matrix(8)
    sin, cos = _tables(1, 8)
    sin, cos = sin[0], cos[0]
    for in_lo, in_hi, v_lo, v_hi in ((1, 3, 0, 1), (1, 4, 1, 3), (1, 4, 2, 3), (2, 4, 0, 1), (0, 4, 1, 2)):
        torch._dynamo.reset()

        def f(x, v_lo=v_lo, v_hi=v_hi):
            inplace(x[v_lo:v_hi], mat, sin, cos)
            return x

        g = torch.compile(f, backend=backend, dynamic=dynamic, fullgraph=True)
        base = torch.randn(5, 2, 3, 8, generator=torch.Generator().manual_seed(in_lo * 10 + v_lo))
        orig, want = base.clone(), base.clone()
        with torch.no_grad():
            f(want[in_lo:in_hi])  # eager
        g(base[in_lo:in_hi])
        assert torch.equal(base, want), (in_lo, in_hi, v_lo, v_hi)
        assert not torch.equal(base[in_lo + v_lo], orig[in_lo + v_lo])  # the view was updated


@_IN_PLACE
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_inplace_updates_column_and_partial_rotary_views_of_a_view_passed_in(backend, inplace):
    """x = base[:, 1] passed in, the graph rotating x[:, :2] (through auto_functionalized_v2 PyTorch
    2.13 lost that update) and x[..., :32] (refused there as a view of D = 0)."""
    for fn, d in ((lambda x: x[:, :2], 64), (lambda x: x[..., :32], 32)):
        mat = get_half_matrix(d)
        sin, cos = _tables(1, d)
        sin, cos = sin[0], cos[0]

        def f(x, fn=fn, mat=mat, sin=sin, cos=cos):
            inplace(fn(x), mat, sin, cos)
            return x

        torch._dynamo.reset()
        base = torch.randn(2, 3, 5, 64, generator=torch.Generator().manual_seed(d))
        orig, want = base.clone(), base.clone()
        with torch.no_grad():
            f(want[:, 1])
        torch.compile(f, backend=backend, fullgraph=True)(base[:, 1])
        assert torch.equal(base, want) and not torch.equal(base, orig)


def test_inplace_value_op_checks_as_the_in_place_op():
    """The private op behind rope_matrix_'s Functionalize kernel refuses what rope_matrix_ refuses,
    with its messages, and otherwise returns rope_matrix's bits."""
    mat = get_half_matrix(8)
    x = torch.randn(4, 8)
    sin, cos = _tables(4, 8)
    assert torch.equal(ops._rope_matrix_inplace_value(x, mat, sin, cos), ops.rope_matrix(x, mat, sin, cos))
    buf = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match=r"rope_matrix_: x shares memory with cos"):
        ops._rope_matrix_inplace_value(buf[0], mat, sin, buf[0])
    with pytest.raises(ValueError, match=r"rope_matrix_: x overlaps itself"):
        ops._rope_matrix_inplace_value(torch.randn(8).expand(4, 8), mat, sin, cos)


def test_functionalized_graph_holds_the_value_op_and_views_not_auto_functionalized():
    """The traced, functionalized program of rope_matrix_ on a view computes the value with
    _rope_matrix_inplace_value and writes it back with PyTorch's own view ops (no
    auto_functionalized node); torch.func.functionalize runs it with the eager bits."""
    from torch.fx.experimental.proxy_tensor import make_fx

    mat = get_half_matrix(8)
    sin, cos = _tables(4, 8)

    def f(base):
        ops.rope_matrix_(base[1:3, :, 1], mat, sin, cos)
        return base

    base = torch.randn(4, 4, 2, 8)
    want = base.clone()
    with torch.no_grad():
        f(want)
    got = torch.func.functionalize(f)(base.clone())
    assert torch.equal(got, want) and not torch.equal(got, base)
    gm = make_fx(torch.func.functionalize(f, remove="mutations_and_views"))(base.clone())
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "npu_ops_transformer_ext._rope_matrix_inplace_value.default" in targets, targets
    assert not any("rope_matrix_.default" in t or "auto_functionalized" in t for t in targets), targets


@pytest.mark.parametrize("strict", [False, True])
def test_exported_inplace_on_a_view_writes_the_views_elements(strict):
    """torch.export of a module that rotates k = qkv[:, :, 1] in place, run on inputs it was not
    traced with: the eager bits at k's elements, q and v untouched, from the exported program as it
    is (which keeps the in-place op) and from its functional form (run_decompositions: the value
    op, written back through the view)."""
    mat = get_half_matrix(8)

    class M(torch.nn.Module):
        def forward(self, qkv, sin, cos):
            ops.rope_matrix_(qkv[:, :, 1], mat, sin, cos)
            return qkv

    sin, cos = (t[:, None] for t in _tables(5, 8))
    with torch.no_grad():
        ep = torch.export.export(M(), (torch.randn(2, 5, 3, 2, 8), sin, cos), strict=strict)
    functional = ep.run_decompositions()
    targets = [str(n.target) for n in functional.graph.nodes if n.op == "call_function"]
    assert "npu_ops_transformer_ext._rope_matrix_inplace_value.default" in targets, targets
    assert not any("auto_functionalized" in t for t in targets), targets
    orig = torch.randn(2, 5, 3, 2, 8)
    want = orig.clone()
    with torch.no_grad():
        M()(want, sin, cos)
    for program in (ep, functional):
        got = orig.clone()
        out = program.module()(got, sin, cos)
        assert torch.equal(got, want) and torch.equal(out, want)
        assert not torch.equal(got[:, :, 1], orig[:, :, 1])
        assert torch.equal(got[:, :, 0], orig[:, :, 0]) and torch.equal(got[:, :, 2], orig[:, :, 2])


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_inplace_refuses_sin_sharing_x_through_a_second_storage(backend, dynamic):
    """Two storage objects over one buffer: torch.compile sees two unrelated inputs, and the fake
    kernel cannot tell they share bytes; the private op behind the Functionalize kernel checks the
    real tensors when the compiled program runs, so the call is refused and x left as it was."""
    import numpy as np

    mat = get_half_matrix(8)

    def f(x, sin, cos):
        ext.rope_matrix_(x, mat, sin, cos)
        return x

    torch._dynamo.reset()
    g = torch.compile(f, backend=backend, dynamic=dynamic, fullgraph=True)
    a = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    x, sin = torch.from_numpy(a), torch.from_numpy(a)
    assert x.untyped_storage() is not sin.untyped_storage() and x.data_ptr() == sin.data_ptr()
    before = x.clone()
    with pytest.raises(Exception, match=r"rope_matrix_: x shares memory with sin"):
        g(x, sin, torch.randn(6, 8))
    assert torch.equal(x, before)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_inplace_takes_a_view_of_a_data_dependent_size(backend):
    """x = buf[:n.item()]: its size is unbacked (it may be 0), and the fake kernel's checks must not
    guard on it (they stopped the trace with GuardOnDataDependentSymNode); the eager bits, at n = 0
    too."""
    mat = get_half_matrix(8)
    sin, cos = _tables(1, 8)
    sin, cos = sin[0], cos[0]

    def f(buf, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= buf.shape[0])
        ext.rope_matrix_(buf[:k], mat, sin, cos)
        return buf

    torch._dynamo.reset()
    g = torch.compile(f, backend=backend, fullgraph=True)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        for k in (3, 0, 6):
            buf = torch.randn(6, 8)
            want = buf.clone()
            with torch.no_grad():
                f(want, torch.tensor(k))
            got = buf.clone()
            g(got, torch.tensor(k))
            assert torch.equal(got, want) and torch.equal(got[k:], buf[k:]), k
