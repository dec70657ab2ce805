"""Autograd of rope_matrix / rope_matrix_qk and the grad rule of rope_matrix_.

The reference for every gradient is torch autograd through the plain formula
``x * cos + (x @ y) * sin`` in float64, written here independently of the package.
"""

import npu_ops_transformer_ext as ext
import pytest
import torch
from npu_ops_transformer_ext import matrices
from torch.utils._python_dispatch import TorchDispatchMode

OPS = torch.ops.npu_ops_transformer_ext
D = 12  # divisible by 4 (quarter) and splits into 3 axes of 4 (3D compose)


def _partial(d, r):
    """Half rotation on the first r dims, zero rows/cols on the rest (pass-through tail)."""
    return torch.block_diag(
        matrices.get_half_matrix(r, dtype=torch.float64), torch.zeros(d - r, d - r)
    )


MATS = {
    "half": lambda: matrices.get_half_matrix(D, dtype=torch.float64),
    "interleave": lambda: matrices.get_interleave_matrix(D, dtype=torch.float64),
    "quarter": lambda: matrices.get_quarter_matrix(D, dtype=torch.float64),
    "interleave_half": lambda: matrices.get_interleave_half_matrix(D, dtype=torch.float64),
    "compose3d": lambda: matrices.compose_matrix(
        *[matrices.get_half_matrix(4, dtype=torch.float64)] * 3
    ),
    "partial": lambda: _partial(D, 8),
    "dense": lambda: torch.randn(
        D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    ),
}

B, N, S = 2, 2, 3
TABLE_SHAPES = {
    "S,D": (S, D),
    "1,1,S,D": (1, 1, S, D),
    "B,1,S,D": (B, 1, S, D),
    "D": (D,),
    "full": (B, N, S, D),
}


def _pair_table(y, shape, gen):
    """A table constant on the pairs of y: random values propagated along y's non-zeros."""
    t = torch.randn(shape, dtype=torch.float64, generator=gen)
    p = (y != 0).to(torch.float64)
    # make equal over connected components: a few rounds of max-propagation along y's graph
    for _ in range(D):
        t = torch.maximum(t, (t.unsqueeze(-1) * p.t() - (1 - p.t()) * 1e9).amax(-2))
    return t


def _ref(x, y, sin, cos):
    return x * cos + (x @ y) * sin


def _inputs(mat, table, pair, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = MATS[mat]().to(dtype)
    shape = TABLE_SHAPES[table]
    if pair:
        sin, cos = _pair_table(y, shape, g), _pair_table(y, shape, g)
    else:
        sin = torch.randn(shape, dtype=torch.float64, generator=g)
        cos = torch.randn(shape, dtype=torch.float64, generator=g)
    x = torch.randn(B, N, S, D, dtype=torch.float64, generator=g)
    return x.to(dtype), y, sin.to(dtype), cos.to(dtype)


@pytest.mark.parametrize("pair", [True, False], ids=["pair-table", "free-table"])
@pytest.mark.parametrize("table", list(TABLE_SHAPES))
@pytest.mark.parametrize("mat", list(MATS))
def test_gradcheck_rope_matrix(mat, table, pair):
    x, y, sin, cos = (t.requires_grad_() for t in _inputs(mat, table, pair))
    # fast mode (random projections of the Jacobian) keeps the 70-case matrix quick; the qk test
    # below and test_grads_match_plain_autograd compare full Jacobian-vector products.
    assert torch.autograd.gradcheck(ext.rope_matrix, (x, y, sin, cos), fast_mode=True)


@pytest.mark.parametrize("pair", [True, False], ids=["pair-table", "free-table"])
@pytest.mark.parametrize("mat", ["half", "interleave", "compose3d", "partial", "dense"])
def test_gradcheck_rope_matrix_qk(mat, pair):
    x, y, sin, cos = _inputs(mat, "B,1,S,D", pair)
    k = torch.randn(B, 1, S, D, dtype=torch.float64)  # GQA/MQA: one k head
    args = [t.requires_grad_() for t in (x, k, y, sin, cos)]
    assert torch.autograd.gradcheck(ext.rope_matrix_qk, tuple(args))


@pytest.mark.parametrize("mat", list(MATS))
def test_grads_match_plain_autograd(mat):
    """All four gradients against autograd through the plain float64 formula."""
    x, y, sin, cos = _inputs(mat, "B,1,S,D", pair=False, seed=3)
    g = torch.randn(B, N, S, D, dtype=torch.float64)
    ins = [t.clone().requires_grad_() for t in (x, y, sin, cos)]
    ours = torch.autograd.grad(ext.rope_matrix(*ins), ins, g)
    ref_ins = [t.clone().requires_grad_() for t in (x, y, sin, cos)]
    refs = torch.autograd.grad(_ref(*ref_ins), ref_ins, g)
    for name, a, b in zip(["x", "y", "sin", "cos"], ours, refs):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")


class _OpLog(TorchDispatchMode):
    """Logs the aten ops that run (at the top level of the dispatcher)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


class _CallLog:
    """Stands in for torch.ops.npu_ops_transformer_ext inside the autograd module, logging calls."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        op = getattr(OPS, name)

        def call(*args):
            self.calls.append((name, args))
            return op(*args)

        return call


def _rope_tables(mode, s, d, dtype=torch.float32):
    ang = torch.randn(s, d // 2, dtype=torch.float64)
    ang = torch.cat([ang, ang], -1) if mode == "half" else ang.repeat_interleave(2, -1)
    return ang.sin().to(dtype), ang.cos().to(dtype)


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_dx_is_one_fused_call_for_pair_tables(mode, monkeypatch):
    """With a pair-constant sin the x-gradient is exactly rope_matrix(g, y^T, sin, cos): one call,
    no matmul, bit-equal to that call."""
    y = (matrices.get_half_matrix if mode == "half" else matrices.get_interleave_matrix)(
        16, dtype=torch.float32
    )
    sin, cos = _rope_tables(mode, 7, 16)
    x = torch.randn(2, 3, 7, 16, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(2, 3, 7, 16, dtype=torch.bfloat16)
    out = ext.rope_matrix(x, y, sin, cos)
    calls = _CallLog()
    monkeypatch.setattr(ext.autograd, "_ops", calls)
    with _OpLog() as log:
        (dx,) = torch.autograd.grad(out, x, g)
    assert log.names == ["npu_ops_transformer_ext.rope_matrix_backward"]
    assert [c[0] for c in calls.calls] == ["rope_matrix"]
    _, (g_, yt, s_, c_) = calls.calls[0]
    assert g_ is g and s_ is sin and c_ is cos and torch.equal(yt, y.t())
    assert torch.equal(dx, OPS.rope_matrix(g, y.t().contiguous(), sin, cos))


def test_dx_low_precision_against_float64():
    """bf16/fp16 x with fp32 tables: dx computed in fp32, rounded once (within 1 ulp of fp64)."""
    y = matrices.get_interleave_matrix(32, dtype=torch.float32)
    sin, cos = _rope_tables("interleave", 33, 32)
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(1, 33, 4, 32, dtype=dtype)
        sin4, cos4 = sin[:, None], cos[:, None]  # BSND tables [S, 1, D]
        g = torch.randn(1, 33, 4, 32, dtype=dtype)
        xr = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(ext.rope_matrix(xr, y, sin4, cos4), xr, g)
        x64 = x.double().requires_grad_()
        (ref,) = torch.autograd.grad(
            _ref(x64, y.double(), sin4.double(), cos4.double()), x64, g.double()
        )
        assert dx.dtype == dtype
        torch.testing.assert_close(dx.double(), ref, atol=1e-2, rtol=torch.finfo(dtype).eps)


def test_dx_free_table_signed_permutation_is_exact():
    """A table that is NOT pair-constant with a signed-permutation y: still one op call (sin
    gathered along the pairs), still exactly the fp64 formula."""
    y = matrices.get_half_matrix(8, dtype=torch.float64)
    sin, cos = torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, 8, dtype=torch.float64)
    (dx,) = torch.autograd.grad(ext.rope_matrix(x, y, sin, cos), x, g)
    torch.testing.assert_close(dx, g * cos + (g * sin) @ y.t(), rtol=0, atol=0)


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_dx_signed_zero_tables_bit_exact(dtype):
    """Tables whose pairs hold +0 and -0 (equal as values, not as bits): the x-gradient of a
    signed permutation is still the exact formula, the sign of every zero included: g*cos plus
    g*sin moved by y^T (an exact move), each product and the sum rounded in fp32 (fp64 for fp64),
    then once to the dtype. Also through rope_matrix_qk's backward."""
    from npu_ops_transformer_ext.reference import rotate_by_matrix

    acc = torch.float64 if dtype == torch.float64 else torch.float32
    gen = torch.Generator().manual_seed(7)
    d = 16
    perm = torch.randperm(d, generator=gen)
    signs = torch.where(torch.rand(d, generator=gen) < 0.5, -1.0, 1.0)
    random_perm = torch.zeros(d, d)
    random_perm[torch.arange(d), perm] = signs
    values = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.0])
    for y in (matrices.get_half_matrix(d), matrices.get_interleave_matrix(d), random_perm):
        y = y.to(acc if dtype == torch.float64 else torch.float32)
        sin = values[torch.randint(0, 5, (6, d), generator=gen)].to(dtype)
        cos = values[torch.randint(0, 5, (6, d), generator=gen)].to(dtype)
        g = values[torch.randint(0, 5, (2, 6, d), generator=gen)].to(dtype)
        x = torch.randn(2, 6, d, generator=gen).to(dtype).requires_grad_()
        expected = (
            (g.to(acc) * cos.to(acc)) + rotate_by_matrix(g.to(acc) * sin.to(acc), y.to(acc).t())
        ).to(dtype)
        (dx,) = torch.autograd.grad(ext.rope_matrix(x, y, sin, cos), x, g)
        assert torch.equal(_bits(dx), _bits(expected))
        k = torch.randn(2, 6, d, generator=gen).to(dtype).requires_grad_()
        dq, dk = torch.autograd.grad(ext.rope_matrix_qk(x, k, y, sin, cos), (x, k), (g, g))
        assert torch.equal(_bits(dq), _bits(expected)) and torch.equal(_bits(dk), _bits(expected))
    # the smallest case: sin = [+0, -0] under half rotation; the gradient is [-0, -0]
    x = torch.ones(1, 2, dtype=dtype, requires_grad=True)
    (dx,) = torch.autograd.grad(
        ext.rope_matrix(x, matrices.get_half_matrix(2), torch.tensor([0.0, -0.0]), torch.tensor([-0.0, -0.0])),
        x,
        torch.ones(1, 2, dtype=dtype),
    )
    assert torch.equal(_bits(dx), _bits(torch.tensor([[-0.0, -0.0]], dtype=dtype)))


def test_qk_grads_equal_separate_calls_and_missing_grad():
    y = matrices.get_interleave_matrix(16, dtype=torch.float32)
    sin, cos = (t.requires_grad_() for t in _rope_tables("interleave", 6, 16))
    q = torch.randn(2, 4, 6, 16, requires_grad=True)
    k = torch.randn(2, 2, 6, 16, requires_grad=True)
    qo, ko = ext.rope_matrix_qk(q, k, y, sin, cos)
    gq, gk = torch.randn_like(qo), torch.randn_like(ko)
    got = torch.autograd.grad((qo, ko), (q, k, sin, cos), (gq, gk))
    a = torch.autograd.grad(ext.rope_matrix(q, y, sin, cos), (q, sin, cos), gq)
    b = torch.autograd.grad(ext.rope_matrix(k, y, sin, cos), (k, sin, cos), gk)
    torch.testing.assert_close(got[0], a[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], b[0], rtol=0, atol=0)
    torch.testing.assert_close(got[2], a[1] + b[1])
    torch.testing.assert_close(got[3], a[2] + b[2])
    # only q used downstream: k's gradient is zero, q's still right
    qo, ko = ext.rope_matrix_qk(q, k, y, sin, cos)
    dq, dk = torch.autograd.grad(qo.sum(), (q, k), allow_unused=True)
    torch.testing.assert_close(dq, torch.autograd.grad(ext.rope_matrix(q, y, sin, cos).sum(), q)[0])
    assert dk is None or not dk.any()


def test_training_step_matches_plain_torch():
    """One SGD step of a tiny q/k projection + RoPE + attention-score loss equals plain torch."""
    torch.manual_seed(0)
    d, h, s = 16, 2, 9
    y = matrices.get_half_matrix(d, dtype=torch.float32)
    sin, cos = _rope_tables("half", s, d)

    def make():
        torch.manual_seed(1)
        return torch.nn.Linear(d * h, 2 * d * h)

    inp = torch.randn(2, s, d * h)
    target = torch.randn(2, h, s, s)
    models = [make(), make()]
    for i, m in enumerate(models):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        q, k = m(inp).view(2, s, 2, h, d).permute(2, 0, 3, 1, 4)  # [B, H, S, D], non-contiguous
        if i == 0:
            q, k = ext.rope_matrix_qk(q, k, y, sin, cos)
        else:
            q, k = _ref(q, y, sin, cos), _ref(k, y, sin, cos)
        loss = ((q @ k.transpose(-1, -2) - target) ** 2).mean()
        loss.backward()
        opt.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b)


def test_x_not_saved_when_tables_frozen():
    y = matrices.get_half_matrix(8, dtype=torch.float32)
    sin, cos = _rope_tables("half", 4, 8)
    x = torch.randn(2, 4, 8, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.shape) or t, lambda t: t
    ):
        ext.rope_matrix(x, y, sin, cos)
    assert torch.Size([2, 4, 8]) not in saved


def test_opcheck_with_grad():
    y = matrices.get_interleave_matrix(8, dtype=torch.float32)
    sin, cos = _rope_tables("interleave", 4, 8)
    x = torch.randn(2, 4, 8, requires_grad=True)
    k = torch.randn(1, 4, 8, requires_grad=True)
    torch.library.opcheck(OPS.rope_matrix, (x, y, sin, cos))
    torch.library.opcheck(OPS.rope_matrix_qk, (x, k, y, sin, cos))
    g = torch.randn(2, 4, 8)
    torch.library.opcheck(OPS.rope_matrix_backward, (g, y, sin, cos))
    torch.library.opcheck(OPS.rope_matrix_qk_backward, (g, g[:1], y, sin, cos))


# ---- in-place --------------------------------------------------------------------------------


def test_inplace_refuses_grad_inputs():
    y = matrices.get_half_matrix(8, dtype=torch.float32)
    sin, cos = _rope_tables("half", 4, 8)
    x = torch.randn(2, 4, 8, requires_grad=True)
    for call in (ext.rope_matrix_, OPS.rope_matrix_):
        with pytest.raises(RuntimeError, match="rope_matrix_: x requires grad"):
            call(x, y, sin, cos)
        with pytest.raises(RuntimeError, match="rope_matrix_: x requires grad"), torch.no_grad():
            call(x, y, sin, cos)
        with pytest.raises(RuntimeError, match="rope_matrix_: sin requires grad"):
            call(x.detach().clone(), y, sin.clone().requires_grad_(), cos)
    with torch.no_grad():  # a learnable table is fine when no graph is being recorded
        ext.rope_matrix_(x.detach().clone(), y, sin.clone().requires_grad_(), cos)


def test_inplace_matches_out_of_place_and_bumps_version():
    y = matrices.get_half_matrix(8, dtype=torch.float32)
    sin, cos = _rope_tables("half", 4, 8)
    a = torch.randn(2, 4, 8, dtype=torch.bfloat16)
    want = ext.rope_matrix(a, y, sin, cos)
    w = torch.randn(2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    loss = (w * a).sum()  # saves a for backward
    v = a._version
    assert ext.rope_matrix_(a, y, sin, cos) is None
    assert a._version > v
    assert torch.equal(a, want)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_inplace_inference_mode():
    y = matrices.get_half_matrix(8, dtype=torch.float32)
    sin, cos = _rope_tables("half", 4, 8)
    with torch.inference_mode():
        a = torch.randn(2, 4, 8)
        want = ext.rope_matrix(a, y, sin, cos)
        ext.rope_matrix_(a, y, sin, cos)
    assert torch.equal(a, want)


# ---- second derivatives ------------------------------------------------------------------------

# Table forms for double backward: x's layout, the table shape given to the op, and whether the op
# gets an expanded (stride-0) view of it.
GG_FORMS = {
    "bnsd-S,D": ((B, N, S, D), (S, D), False),
    "bnsd-1,1,S,D": ((B, N, S, D), (1, 1, S, D), False),
    "bnsd-B,1,S,D": ((B, N, S, D), (B, 1, S, D), False),
    "bnsd-D": ((B, N, S, D), (D,), False),
    "bnsd-full": ((B, N, S, D), (B, N, S, D), False),
    "bsnd-1,S,1,D": ((B, S, N, D), (1, S, 1, D), False),
    "bsnd-S,1,D": ((B, S, N, D), (S, 1, D), False),
    "bnsd-expanded": ((B, N, S, D), (S, D), True),
}


def _gg_inputs(mat, form, pair, seed=0):
    g = torch.Generator().manual_seed(seed)
    xshape, tshape, expand = GG_FORMS[form]
    y = MATS[mat]()
    if pair:
        sin, cos = _pair_table(y, tshape, g), _pair_table(y, tshape, g)
    else:
        sin = torch.randn(tshape, dtype=torch.float64, generator=g)
        cos = torch.randn(tshape, dtype=torch.float64, generator=g)
    x = torch.randn(xshape, dtype=torch.float64, generator=g)
    if expand:
        # gradcheck perturbs each input element, so it gets the compact table; the op gets a view
        def fn(x, y, sin, cos):
            return ext.rope_matrix(x, y, sin.expand(xshape), cos.expand(xshape))
    else:
        fn = ext.rope_matrix
    return fn, (x, y, sin, cos)


@pytest.mark.parametrize("pair", [True, False], ids=["pair-table", "free-table"])
@pytest.mark.parametrize("form", list(GG_FORMS))
@pytest.mark.parametrize("mat", list(MATS))
def test_gradgradcheck_rope_matrix(mat, form, pair):
    fn, args = _gg_inputs(mat, form, pair)
    args = tuple(t.requires_grad_() for t in args)
    assert torch.autograd.gradgradcheck(fn, args, fast_mode=True)


@pytest.mark.parametrize("mat", ["half", "interleave", "compose3d", "partial", "dense"])
def test_gradgradcheck_rope_matrix_qk(mat):
    _, (x, y, sin, cos) = _gg_inputs(mat, "bnsd-B,1,S,D", pair=False)
    k = torch.randn(B, 1, S, D, dtype=torch.float64)  # GQA/MQA: one k head
    args = tuple(t.requires_grad_() for t in (x, k, y, sin, cos))
    assert torch.autograd.gradgradcheck(ext.rope_matrix_qk, args)

    # only one of the two outputs used: the other gradient is None in the double backward
    def q_only(q, k, y, sin, cos):
        return ext.rope_matrix_qk(q, k, y, sin, cos)[0]

    assert torch.autograd.gradgradcheck(q_only, args)


def _second_order(fn, ins, g, w):
    """d/d(ins) of sum_i <w_i, d<g, fn(ins)>/d ins_i>: every second derivative, mixed ones too."""
    first = torch.autograd.grad(fn(*ins), ins, g, create_graph=True)
    return torch.autograd.grad(sum((a * b).sum() for a, b in zip(first, w)), ins)


@pytest.mark.parametrize("form", ["bnsd-S,D", "bsnd-1,S,1,D", "bnsd-full"])
@pytest.mark.parametrize("mat", list(MATS))
def test_second_derivatives_match_plain_autograd(mat, form):
    """Every second derivative (x, y, sin, cos and mixed) against autograd through the plain fp64
    formula, with sin not equal within the rotated pairs (the case that went wrong for y)."""
    _, base = _gg_inputs(mat, form, pair=False, seed=4)
    gen = torch.Generator().manual_seed(9)
    g = torch.randn(base[0].shape, dtype=torch.float64, generator=gen)
    w = [torch.randn(t.shape, dtype=torch.float64, generator=gen) for t in base]
    ours = _second_order(ext.rope_matrix, [t.clone().requires_grad_() for t in base], g, w)
    refs = _second_order(_ref, [t.clone().requires_grad_() for t in base], g, w)
    for name, a, b in zip(["x", "y", "sin", "cos"], ours, refs):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d2/d{name}: {m}")


def test_double_backward_through_the_backward_helper_ops():
    """The x-gradient helper op is itself differentiable (no 'autograd kernel was not registered'
    fallback, which silently drops the gradient)."""
    import warnings

    _, (x, y, sin, cos) = _gg_inputs("half", "bnsd-S,D", pair=False)
    g = torch.randn(x.shape, dtype=torch.float64, requires_grad=True)
    ins = [t.requires_grad_() for t in (y, sin, cos)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dx = OPS.rope_matrix_backward(g, *ins)
        got = torch.autograd.grad(dx.sum(), [g, *ins])
    ref_ins = [t.detach().clone().requires_grad_() for t in (g, y, sin, cos)]
    g_, y_, s_, c_ = ref_ins
    ref = torch.autograd.grad((g_ * c_ + (g_ * s_) @ y_.t()).sum(), ref_ins)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


def test_double_backward_under_compile_fails_loudly():
    """torch.compile's AOTAutograd does not support double backward for any op: it raises, it does
    not return a wrong second derivative. Eager mode gives it."""
    _, (x, y, sin, cos) = _gg_inputs("interleave", "bnsd-S,D", pair=False)
    ins = [t.requires_grad_() for t in (x, y, sin, cos)]
    torch._dynamo.reset()
    compiled = torch.compile(ext.rope_matrix, fullgraph=True, backend="aot_eager")
    first = torch.autograd.grad(compiled(*ins).square().sum(), ins, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(sum(t.square().sum() for t in first), ins)
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_second_derivatives_low_precision(dtype):
    """bf16/fp16/fp32 x with fp32 tables and y: every second derivative near the fp64 one (the
    first-order path already rounds once per op; this checks dtypes flow through the double
    backward), and opcheck of the helper ops with inputs that require grad."""
    gen = torch.Generator().manual_seed(2)
    y = matrices.get_interleave_matrix(16, dtype=torch.float32)
    sin, cos = (torch.randn(5, 16, generator=gen) for _ in range(2))
    x = torch.randn(2, 5, 16, generator=gen).to(dtype)
    g = torch.randn(2, 5, 16, generator=gen).to(dtype)
    w = [torch.randn(t.shape, generator=gen).to(t.dtype) for t in (x, y, sin, cos)]
    ours = _second_order(
        ext.rope_matrix, [t.clone().requires_grad_() for t in (x, y, sin, cos)], g, w
    )
    refs = _second_order(
        _ref,
        [t.double().requires_grad_() for t in (x, y, sin, cos)],
        g.double(),
        [t.double() for t in w],
    )
    tol = {torch.bfloat16: 5e-2, torch.float16: 5e-3, torch.float32: 1e-4}[dtype]
    for name, a, b, t in zip(["x", "y", "sin", "cos"], ours, refs, (x, y, sin, cos)):
        assert a.dtype == t.dtype, name
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * b.abs().max().item())
    torch.library.opcheck(
        OPS.rope_matrix_backward,
        (g.clone().requires_grad_(), y.clone().requires_grad_(), sin.clone().requires_grad_(), cos),
    )
    torch.library.opcheck(
        OPS.rope_matrix_qk_backward,
        (
            g.clone().requires_grad_(),
            g[:1].clone().requires_grad_(),
            y,
            sin,
            cos.clone().requires_grad_(),
        ),
    )


def test_forward_mode_ad_is_refused_naming_the_input():
    # Forward-mode AD is not implemented: no call may return an output without its tangent.
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacfwd, jvp

    y = matrices.get_half_matrix(D)
    sin, cos, x = torch.randn(3, 4, D).unbind(0)
    msg = "forward-mode AD is not supported"
    with pytest.raises(RuntimeError, match=f"rope_matrix: x carries a forward-mode tangent.*{msg}"):
        jvp(lambda t: OPS.rope_matrix(t, y, sin, cos), (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=f"rope_matrix: x carries.*{msg}"):
        jacfwd(lambda t: ext.rope_matrix(t, y, sin, cos))(x)
    with fwAD.dual_level():
        dual = lambda t: fwAD.make_dual(t, torch.ones_like(t))
        with pytest.raises(RuntimeError, match=f"rope_matrix: sin carries.*{msg}"):
            OPS.rope_matrix(x, y, dual(sin), cos)
        with pytest.raises(RuntimeError, match=f"rope_matrix: x carries.*{msg}"):
            OPS.rope_matrix(dual(x.clone().requires_grad_()), y, sin, cos)
        with pytest.raises(RuntimeError, match=f"rope_matrix_qk: k carries.*{msg}"):
            OPS.rope_matrix_qk(x, dual(x), y, sin, cos)
        xd = dual(x.clone())
        before = fwAD.unpack_dual(xd).primal.clone()
        with pytest.raises(RuntimeError, match=f"rope_matrix_: x carries.*{msg}"):
            OPS.rope_matrix_(xd, y, sin, cos)
        assert torch.equal(fwAD.unpack_dual(xd).primal, before)  # refused before writing


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda g, y, s, c: OPS.rope_matrix_backward(g, torch.eye(D + 1), s, c),
         r"rope_matrix_backward: mat must be \[D, D\] with D = grad.size\(-1\) = 12, got \[13, 13\]"),
        (lambda g, y, s, c: OPS.rope_matrix_backward(g, y, s[:, :4], c),
         r"rope_matrix_backward: sin must have last dim D = grad.size\(-1\) = 12, got \[4, 4\]"),
        (lambda g, y, s, c: OPS.rope_matrix_qk_backward(g, g[..., :8], y, s, c),
         r"rope_matrix_qk_backward: mat must be \[D, D\] with D = grad_k.size\(-1\) = 8"),
    ],
)
def test_backward_helper_ops_check_their_inputs(call, msg):
    # The x-gradient helper ops are public ops too: a bad call names the argument, as the forward does,
    # eagerly and while tracing.
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.randn(2, 4, D)
    y = matrices.get_half_matrix(D)
    sin, cos = torch.randn(2, 4, D).unbind(0)
    with pytest.raises(ValueError, match=msg):
        call(g, y, sin, cos)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (g, y, sin, cos)]
        with pytest.raises(ValueError, match=msg):
            call(*fake)


def test_empty_head_dim_backward_gives_empty_gradients():
    # D = 0 is accepted by the forward (an empty result); its backward must not fail either.
    x = torch.randn(2, 3, 0, requires_grad=True)
    y = torch.zeros(0, 0, requires_grad=True)
    sin = torch.zeros(3, 0, requires_grad=True)
    cos = torch.zeros(3, 0, requires_grad=True)
    OPS.rope_matrix(x, y, sin, cos).sum().backward()
    for t in (x, y, sin, cos):
        assert t.grad is not None and t.grad.shape == t.shape
    q, k = torch.randn(2, 3, 0, requires_grad=True), torch.randn(1, 3, 0, requires_grad=True)
    qo, ko = OPS.rope_matrix_qk(q, k, y, sin, cos)
    (qo.sum() + ko.sum()).backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_backward_helpers_general_path_contiguous_and_opcheck():
    """The x-gradient helpers' general path (dense mat, a table not equal within pairs) returns a
    contiguous result, as their fake kernels say, for a grad of any strides (inductor asserts the
    fake's strides)."""
    g = torch.Generator().manual_seed(0)
    d = 8
    grad = torch.randn(1, 7, 2, d, generator=g).transpose(1, 2)
    mat, sin, cos = torch.randn(d, d, generator=g), torch.randn(7, d, generator=g), torch.randn(7, d, generator=g)
    ops = torch.ops.npu_ops_transformer_ext
    dx = ops.rope_matrix_backward(grad, mat, sin, cos)
    assert dx.is_contiguous()
    want = grad.double() * cos.double() + (grad.double() * sin.double()) @ mat.double().t()
    torch.testing.assert_close(dx.double(), want, rtol=1e-5, atol=1e-5)
    for op, args in [(ops.rope_matrix_backward.default, (grad, mat, sin, cos)),
                     (ops.rope_matrix_qk_backward.default, (grad, grad.contiguous(), mat, sin, cos))]:
        torch.library.opcheck(op, args)


def test_forward_over_reverse_tangent_on_grad_output_is_refused():
    """A forward-mode tangent on grad_output (torch.autograd.grad(out, x, make_dual(g, t))) used to
    be dropped (dx with no tangent, read as zero); the helper ops now refuse it, naming it."""
    import torch.autograd.forward_ad as fwAD

    d = 8
    y = matrices.get_half_matrix(d, dtype=torch.float64)
    s, c = torch.randn(5, d, dtype=torch.float64), torch.randn(5, d, dtype=torch.float64)
    x = torch.randn(3, 5, d, dtype=torch.float64, requires_grad=True)
    g, t = torch.randn(3, 5, d, dtype=torch.float64), torch.randn(3, 5, d, dtype=torch.float64)
    with fwAD.dual_level():
        dual = fwAD.make_dual(g, t)
        with pytest.raises(RuntimeError, match="rope_matrix_backward: grad carries a forward-mode tangent"):
            torch.autograd.grad(OPS.rope_matrix(x, y, s, c), x, dual)
        with pytest.raises(RuntimeError, match="rope_matrix_backward: grad carries a forward-mode tangent"):
            OPS.rope_matrix_backward(dual, y, s, c)
        with pytest.raises(RuntimeError, match="rope_matrix_qk_backward: grad_k carries a forward-mode tangent"):
            OPS.rope_matrix_qk_backward(g, dual, y, s, c)
    # without a tangent the same calls work
    (dx,) = torch.autograd.grad(OPS.rope_matrix(x, y, s, c), x, g)
    torch.testing.assert_close(dx, g * c + (g * s) @ y.t(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("s", [5, 2048])
@pytest.mark.parametrize("which", ["mat", "sin", "cos", "x"])
def test_batched_grads_equal_a_loop(which, s):
    """torch.autograd.grad(..., is_grads_batched=True): the mat gradient crashed (flatten has no
    batching rule), and the sin/cos gradients of an x over 512 KiB (summed in slices, copied into an
    unbatched result); every gradient equals one grad call per batched grad_output."""
    torch.manual_seed(0)
    d = 8
    ins = {"x": torch.randn(2, 3, s, d, dtype=torch.float64), "mat": matrices.get_half_matrix(d, dtype=torch.float64),
           "sin": torch.randn(s, d, dtype=torch.float64), "cos": torch.randn(s, d, dtype=torch.float64)}
    ins[which].requires_grad_()
    gs = torch.randn(4, 2, 3, s, d, dtype=torch.float64)
    out = OPS.rope_matrix(ins["x"], ins["mat"], ins["sin"], ins["cos"])
    (batched,) = torch.autograd.grad(out, ins[which], gs, is_grads_batched=True, retain_graph=True)
    for i in range(gs.shape[0]):
        (one,) = torch.autograd.grad(out, ins[which], gs[i], retain_graph=True)
        torch.testing.assert_close(batched[i], one, rtol=0, atol=1e-12)
    x, m, s, c = (ins[k].detach() for k in ("x", "mat", "sin", "cos"))
    want = {"mat": lambda g: x.flatten(0, -2).t() @ (g * s).flatten(0, -2), "sin": lambda g: (g * (x @ m)).sum((0, 1)),
            "cos": lambda g: (g * x).sum((0, 1)), "x": lambda g: g * c + (g * s) @ m.t()}[which]
    torch.testing.assert_close(batched[1], want(gs[1]), rtol=1e-12, atol=1e-12)


def test_zero_tensor_grad_output_gives_zero_table_grads():
    """An efficient zero tensor as grad_output made the table gradients add in place into an
    immutable ZeroTensor; now they are zeros, as plain torch gives."""
    d = 8
    y = matrices.get_half_matrix(d)
    x = torch.randn(2, 3, 5, d, requires_grad=True)
    s = torch.randn(5, d, requires_grad=True)
    c = torch.randn(5, d, requires_grad=True)
    m = y.clone().requires_grad_()
    z = torch._efficientzerotensor((2, 3, 5, d))
    grads = torch.autograd.grad(OPS.rope_matrix(x, m, s, c), [x, m, s, c], z)
    for got, like in zip(grads, (x, m, s, c)):
        assert got.shape == like.shape and not got.any()


@pytest.mark.parametrize("backend,qk", [("aot_eager", False), ("aot_eager", True), ("inductor", False), ("inductor", True)])
def test_table_gradients_under_compile_with_dynamic_shapes(backend, qk):
    """A second sequence length makes torch.compile retrace with a symbolic S; the backward of the
    table gradients must then trace too (it read concrete sizes and failed to compile), and every
    gradient must keep the eager bits at each length (rope_matrix_qk's mat gradient, a sum of a q and
    a k product, lost them under inductor from S = 128, which fused the sum into an addmm)."""
    d = 64
    mat = matrices.get_half_matrix(d)
    if qk:
        def fn(q, k, mat, sin, cos):
            return sum(o.square().sum() for o in ext.rope_matrix_qk(q, k, mat, sin, cos))
    else:
        def fn(q, k, mat, sin, cos):
            return (ext.rope_matrix(q, mat, sin, cos) * k).sum()
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    gen = torch.Generator().manual_seed(5)
    for s in (7, 9, 16, 33, 128, 200):
        ins = [torch.randn(2, 3, s, d, generator=gen), torch.randn(2, 1 if qk else 3, s, d, generator=gen),
               mat.clone(), torch.randn(s, d, generator=gen), torch.randn(1, s, d, generator=gen)]
        eager_ins = [t.clone().requires_grad_() for t in ins]
        want = torch.autograd.grad(fn(*eager_ins), eager_ins)
        comp_ins = [t.clone().requires_grad_() for t in ins]
        got = torch.autograd.grad(compiled(*comp_ins), comp_ins)
        for name, a, b in zip(("q", "k", "mat", "sin", "cos"), got, want):
            assert torch.equal(a, b), (s, name)
    torch._dynamo.reset()


def test_qk_mat_gradient_under_inductor_with_static_shapes():
    """rope_matrix_qk under inductor with static shapes: q, k, sin and cos gradients with the eager
    bits; the mat gradient, whose q and k products inductor may regroup into one product over the
    concatenated rows (it does here), within fp32 rounding of eager's (docs/training.md)."""
    d, s = 64, 128
    mat = matrices.get_half_matrix(d)

    def fn(q, k, mat, sin, cos):
        return sum(o.square().sum() for o in ext.rope_matrix_qk(q, k, mat, sin, cos))

    gen = torch.Generator().manual_seed(6)
    ins = [torch.randn(2, 4, s, d, generator=gen), torch.randn(2, 2, s, d, generator=gen), mat.clone(),
           torch.randn(s, d, generator=gen), torch.randn(s, d, generator=gen)]
    eager_ins = [t.clone().requires_grad_() for t in ins]
    want = torch.autograd.grad(fn(*eager_ins), eager_ins)
    torch._dynamo.reset()
    comp_ins = [t.clone().requires_grad_() for t in ins]
    got = torch.autograd.grad(torch.compile(fn, fullgraph=True, backend="inductor", dynamic=False)(*comp_ins), comp_ins)
    for name, a, b in zip(("q", "k", "mat", "sin", "cos"), got, want):
        if name == "mat":
            # sums of 1536 products each: within fp32 rounding of the largest entries' scale
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5 * b.abs().max().item())
        else:
            assert torch.equal(a, b), name
    torch._dynamo.reset()
