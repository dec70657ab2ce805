"""NaN, +-Inf, +-0, subnormals and near-overflow values in x, sin and cos.

For a (partial) signed permutation the contract is bits: ``x @ y`` moves and negates elements
exactly, so the CPU op under every kernel family this machine has, the reference and the twin (the
NPU kernel) give the same bits (a NaN in the same place; its sign and payload are not fixed). For a
dense y the product is an IEEE matmul: NaN and Inf spread along the row as IEEE arithmetic says,
finite values agree within the dtype's rounding.
"""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch
from npu_ops_transformer_ext.matrices import get_half_matrix, get_interleave_matrix
from npu_ops_transformer_ext.reference import (
    mode_matrix,
    rope_matrix_reference,
    rotate_by_matrix,
    signed_permutation_columns,
)
from special_values import (
    ISAS,
    assert_bit_exact,
    compare_twin,
    cpu_isa,
    cpu_results,
    special_values,
    twin,
    twin_supports,
)

ops = torch.ops.npu_ops_transformer_ext
DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
}


def _partial(d, r, mode="half"):
    """Rotation on the first r dims, all-zero rows/columns on the rest (partial rotary)."""
    return torch.block_diag(mode_matrix(mode, [r], dtype=torch.float32), torch.zeros(d - r, d - r))


def _partial_middle(d):
    """Zero columns in the middle: interleave on [0, d/4) and [d/2, d), nothing on [d/4, d/2)."""
    q = d // 4
    return torch.block_diag(
        get_interleave_matrix(q, dtype=torch.float32),
        torch.zeros(q, q),
        get_half_matrix(d - 2 * q, dtype=torch.float32),
    )


def _random_signed_permutation(d, seed, zero_cols=0):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(d, generator=g)
    sign = (torch.randint(0, 2, (d,), generator=g) * 2 - 1).float()
    y = torch.zeros(d, d)
    y[perm, torch.arange(d)] = sign
    if zero_cols:
        y[:, torch.randperm(d, generator=g)[:zero_cols]] = 0
    return y


# Pair matrices (each column's partner's partner is itself, or the column is all zero).
PAIR_MATRICES = {
    "half16": lambda: get_half_matrix(16, dtype=torch.float32),
    "interleave32": lambda: get_interleave_matrix(32, dtype=torch.float32),
    "quarter64": lambda: mode_matrix("quarter", [64], dtype=torch.float32),
    "interleave-half32": lambda: mode_matrix("interleave-half", [32], dtype=torch.float32),
    "2d-interleave64+64": lambda: mode_matrix("interleave", [64, 64], dtype=torch.float32),
    "3d-half44+44+40": lambda: mode_matrix("half", [44, 44, 40], dtype=torch.float32),
    "3d-interleave16+56+56": lambda: mode_matrix("interleave", [16, 56, 56], dtype=torch.float32),
    "partial-half96of128": lambda: _partial(128, 96),
    "partial-interleave-middle64": lambda: _partial_middle(64),
}
# Any signed permutation, partial ones included.
MATRICES = dict(
    PAIR_MATRICES,
    **{
        "random48": lambda: _random_signed_permutation(48, 1),
        "random-partial64": lambda: _random_signed_permutation(64, 2, zero_cols=9),
        "random-partial-odd-d23": lambda: _random_signed_permutation(23, 3, zero_cols=4),
    },
)


def _table_dtypes(dt):
    return ("x",) if dt in ("fp32", "fp64") else ("x", "fp32")


def _check_cpu(x, y, sin, cos, what):
    ref = rope_matrix_reference(x, y, sin, cos)
    for isa, out in cpu_results(lambda: ops.rope_matrix(x, y, sin, cos)):
        assert_bit_exact(out, ref, f"{what} cpu[{isa}]")
    return ref


# ---- the reference itself ---------------------------------------------------------------------


def test_reference_inf_stays_inf():
    # A matmul computes Inf * 0 = NaN in every column; the exact move does not.
    y = get_half_matrix(16)
    s = c = torch.full((16,), 0.5)
    x = torch.ones(2, 16, dtype=torch.bfloat16)
    x[0, 3] = float("inf")
    out = rope_matrix_reference(x, y, s, c)
    want = torch.ones(2, 16)
    want[0, :8] = 0.0  # 1 * 0.5 + (-1) * 0.5
    want[0, 3] = float("inf")
    want[0, 11] = float("inf")  # the partner: 1 * 0.5 + inf * 0.5
    want[1, :8] = 0.0
    assert_bit_exact(out, want.bfloat16(), "reference")


def test_reference_negative_zero_stays():
    y = get_half_matrix(16)
    x = torch.zeros(2, 16, dtype=torch.bfloat16)
    out = rope_matrix_reference(x, y, torch.ones(16), -torch.ones(16))
    # out[j] = 0 * -1 + (x @ y)[j] * 1 = -0 + (-0 or +0): -0 where the move negates (j < 8)
    assert_bit_exact(
        out, torch.tensor([-0.0] * 8 + [0.0] * 8).expand(2, 16).bfloat16(), "reference"
    )


@pytest.mark.parametrize("name", list(MATRICES))
def test_reference_nan_reaches_only_its_partner(name):
    y = MATRICES[name]()
    d = y.shape[0]
    src, neg, live = signed_permutation_columns(y)
    for i in range(d):
        x = torch.randn(d, d)
        x[torch.arange(d), (torch.arange(d) + i) % d] = float("nan")  # row r: NaN at (r + i) % d
        xy = rotate_by_matrix(x, y)
        for r in range(d):
            k = (r + i) % d
            want = torch.zeros(d, dtype=torch.bool)
            want[(src == k) & live] = True
            assert torch.equal(torch.isnan(xy[r]), want), (r, k)
    # the move is exact and signed: -x where y holds -1, +0 in an all-zero column
    x = torch.tensor([[-0.0, float("inf"), -float("inf"), 1e-45, -3.0e38] * d]).float()[:, :d]
    xy = rotate_by_matrix(x, y)
    want = torch.where(live, torch.where(neg, -x[:, src], x[:, src]), torch.zeros(()))
    assert torch.equal(xy.view(torch.int32), want.view(torch.int32))


def test_reference_dense_is_ieee_matmul():
    y = torch.randn(16, 16)
    y[3, 5] = 0.0
    x = torch.randn(3, 16)
    x[1, 3] = float("inf")
    x[2, 7] = float("nan")
    xy = rotate_by_matrix(x, y)
    assert torch.isnan(xy[1, 5])  # Inf * 0
    assert torch.isinf(xy[1, :5]).all()
    assert torch.isnan(xy[2]).all()
    torch.testing.assert_close(xy[0], x[0] @ y)


# ---- every combination on each pair -----------------------------------------------------------


def _grid_inputs(y, dtype, table_dtype, seed=0):
    """Rows that put every combination (x[j], x[partner], sin[j], cos[j]) of the special values on
    some pair of every row, and every (x[j], sin[j], cos[j]) on the all-zero columns."""
    src, _, live = signed_permutation_columns(y)
    d = y.shape[0]
    firsts = [j for j in range(d) if live[j] and int(src[j]) > j and int(src[src[j]]) == j]
    zeros = [j for j in range(d) if not live[j]]
    vx, vt = special_values(dtype), special_values(table_dtype)
    combos = torch.tensor(list(itertools.product(vx, vx, vt, vt)), dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    shuffled = combos[torch.randperm(len(combos), generator=g)]
    per_row = max(len(firsts), 1)
    rows = -(-len(combos) // per_row)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64)
    sin = torch.randn(rows, d, generator=g, dtype=torch.float64)
    cos = torch.randn(rows, d, generator=g, dtype=torch.float64)
    k = torch.arange(rows * per_row) % len(combos)
    for n, j in enumerate(firsts):
        c, c2 = combos[k[n::per_row]], shuffled[k[n::per_row]]
        p = int(src[j])
        x[:, j], x[:, p], sin[:, j], cos[:, j] = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
        sin[:, p], cos[:, p] = c2[:, 2], c2[:, 3]
    for n, j in enumerate(zeros):
        c = shuffled[torch.arange(rows) * (n + 1) % len(combos)]
        x[:, j], sin[:, j], cos[:, j] = c[:, 0], c[:, 2], c[:, 3]
    return x.to(dtype), sin.to(table_dtype), cos.to(table_dtype)


def _grid_params():
    for name, dt in itertools.product(PAIR_MATRICES, ("bf16", "fp16", "fp32", "fp64")):
        for tdt in _table_dtypes(dt):
            yield pytest.param(name, dt, tdt, id=f"{name}-{dt}-tab_{tdt}")


@pytest.mark.parametrize("name,dt,tdt", list(_grid_params()))
def test_every_combination_bit_exact(name, dt, tdt):
    dtype = DTYPES[dt]
    table_dtype = dtype if tdt == "x" else torch.float32
    y = PAIR_MATRICES[name]().to(dtype)
    x, sin, cos = _grid_inputs(y, dtype, table_dtype)
    ref = _check_cpu(x, y, sin, cos, f"{name} {dt} tab_{tdt}")
    if twin_supports(x, y, sin, cos):
        compare_twin(x, y, sin, cos, ref, f"{name} {dt} tab_{tdt}")


# ---- special values sprinkled over real layouts -----------------------------------------------


def _sprinkle(t, values, frac, g):
    vals = torch.tensor(values, dtype=torch.float64)
    hit = torch.rand(t.shape, generator=g, dtype=torch.float64) < frac
    pick = vals[torch.randint(0, len(vals), t.shape, generator=g)]
    return torch.where(hit, pick, t)


LAYOUTS = {  # x shape from (S, D), table shape
    "bnsd-sd": (lambda s, d: (2, 3, s, d), lambda s, d: (s, d)),
    "bnsd-11sd": (lambda s, d: (1, 2, s, d), lambda s, d: (1, 1, s, d)),
    "bsnd-1s1d": (lambda s, d: (2, s, 3, d), lambda s, d: (1, s, 1, d)),
    "bnsd-full": (lambda s, d: (2, 2, s, d), lambda s, d: (2, 2, s, d)),
    "sd-d": (lambda s, d: (s, d), lambda s, d: (d,)),
}


def _sprinkle_params():
    for name, dt in itertools.product(MATRICES, ("bf16", "fp16", "fp32", "fp64")):
        for tdt in _table_dtypes(dt):
            yield pytest.param(name, dt, tdt, id=f"{name}-{dt}-tab_{tdt}")


@pytest.mark.parametrize("name,dt,tdt", list(_sprinkle_params()))
def test_sprinkled_special_values_bit_exact(name, dt, tdt):
    dtype = DTYPES[dt]
    table_dtype = dtype if tdt == "x" else torch.float32
    y = MATRICES[name]().to(dtype)
    d = y.shape[0]
    g = torch.Generator().manual_seed(d)
    twin_cases = []
    for lay, (xs, ts) in LAYOUTS.items():
        s = 7
        x = _sprinkle(
            torch.randn(xs(s, d), generator=g, dtype=torch.float64), special_values(dtype), 0.3, g
        )
        sin = _sprinkle(
            torch.randn(ts(s, d), generator=g, dtype=torch.float64),
            special_values(table_dtype),
            0.2,
            g,
        )
        cos = _sprinkle(
            torch.randn(ts(s, d), generator=g, dtype=torch.float64),
            special_values(table_dtype),
            0.2,
            g,
        )
        x, sin, cos = x.to(dtype), sin.to(table_dtype), cos.to(table_dtype)
        what = f"{name} {dt} tab_{tdt} {lay}"
        ref = _check_cpu(x, y, sin, cos, what)
        # the fused q/k op and the in-place op share the contract
        k = x.flip(0)  # another tensor of x's shape: the tables broadcast to it too
        ref_k = rope_matrix_reference(k, y, sin, cos)
        for isa, (qo, ko) in cpu_results(functools.partial(ops.rope_matrix_qk, x, k, y, sin, cos)):
            assert_bit_exact(qo, ref, f"{what} qk.q cpu[{isa}]")
            assert_bit_exact(ko, ref_k, f"{what} qk.k cpu[{isa}]")
        for cap, isa in ISAS:
            with cpu_isa(cap):
                xi = x.clone()
                ops.rope_matrix_(xi, y, sin, cos)
            assert_bit_exact(xi, ref, f"{what} in-place cpu[{isa}]")
        if lay in ("bnsd-sd", "bnsd-11sd", "bsnd-1s1d") and twin_supports(x, y, sin, cos):
            twin_cases.append((x, y, sin, cos, ref, what))
    for case in twin_cases:  # last: an expected twin failure ends the test
        compare_twin(*case[:5], case[5])


@pytest.mark.skipif(
    not twin_supports(torch.zeros(1, 16), None, None, None), reason="the twin is not built"
)
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(
    "name", ["half16", "interleave32", "3d-half44+44+40", "partial-half96of128"]
)
def test_twin_exact_where_the_cube_is(name, dt):
    """Where the twin's cube-matmul path is already exact for a signed permutation (x finite and
    non-zero: subnormals and near-overflow values included), strictly bit-equal; tables hold every
    special value (NaN, +-Inf, +-0, ...), which only meet the vector unit."""
    dtype = DTYPES[dt]
    y = PAIR_MATRICES[name]().to(dtype)
    d = y.shape[0]
    g = torch.Generator().manual_seed(d)
    for table_dtype in {dtype, torch.float32}:
        finite = torch.tensor([v for v in special_values(dtype) if math.isfinite(v) and v != 0])
        x = finite[torch.randint(0, len(finite), (2, 40, d), generator=g)].to(dtype)
        tv = torch.tensor(special_values(table_dtype), dtype=torch.float64)
        sin = tv[torch.randint(0, len(tv), (40, d), generator=g)].to(table_dtype)
        cos = tv[torch.randint(0, len(tv), (1, 40, d), generator=g)].to(table_dtype)
        ref = _check_cpu(x, y, sin, cos, f"{name} {dt} tables {table_dtype}")
        out, report = twin.run(x, y, sin, cos)
        assert_bit_exact(out, ref, f"{name} {dt} tables {table_dtype} twin[{report['kernel']}]")


# ---- dense y: IEEE matmul ---------------------------------------------------------------------

TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32", "fp64"])
def test_dense_non_finite_values_follow_ieee(dt):
    """NaN and Inf where IEEE arithmetic puts them (the same places on every kernel family and the
    reference); the finite rest within the dtype's rounding. Near-overflow values are left out here:
    whether a finite sum overflows depends on the order of accumulation, which is not specified."""
    dtype = DTYPES[dt]
    g = torch.Generator().manual_seed(5)
    d = 64
    y = (torch.randn(d, d, generator=g) / 8).to(dtype)
    y[torch.rand(d, d, generator=g) < 0.2] = 0  # zeros: Inf * 0 = NaN
    vals = [v for v in special_values(dtype) if not math.isfinite(v) or abs(v) < 1e4]
    x = _sprinkle(torch.randn(2, 3, 9, d, generator=g, dtype=torch.float64), vals, 0.02, g).to(
        dtype
    )
    sin = _sprinkle(torch.randn(9, d, generator=g, dtype=torch.float64), vals, 0.05, g).to(dtype)
    cos = _sprinkle(torch.randn(9, d, generator=g, dtype=torch.float64), vals, 0.05, g).to(dtype)
    ref = rope_matrix_reference(x, y, sin, cos)
    assert torch.isnan(ref).any() and torch.isinf(ref).any() and torch.isfinite(ref).any()
    for isa, out in cpu_results(lambda: ops.rope_matrix(x, y, sin, cos)):
        assert torch.equal(torch.isnan(out), torch.isnan(ref)), f"cpu[{isa}]: NaN elsewhere"
        assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0)), (
            f"cpu[{isa}]: +Inf elsewhere"
        )
        assert torch.equal(out.isinf() & (out < 0), ref.isinf() & (ref < 0)), (
            f"cpu[{isa}]: -Inf elsewhere"
        )
        fin = torch.isfinite(ref)
        torch.testing.assert_close(out[fin], ref[fin], rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32", "fp64"])
def test_dense_subnormals_not_flushed(dt):
    """A dense y that only scales: ``x @ (2 I)`` is exact, so subnormal x must come out as 2x,
    bit for bit, on every kernel family (no flush to zero of inputs or products)."""
    dtype = DTYPES[dt]
    fi = torch.finfo(dtype)
    d = 32
    x = torch.tensor([fi.tiny * fi.eps * k for k in range(1, d + 1)], dtype=torch.float64)
    x = torch.stack([x, -x, x / 4]).to(dtype)
    y = (2 * torch.eye(d)).to(dtype)
    one, zero = torch.ones(d, dtype=dtype), torch.zeros(d, dtype=dtype)
    ref = rope_matrix_reference(x, y, one, zero)
    assert_bit_exact(ref, (x.double() * 2).to(dtype), "reference")
    failed = []
    for isa, out in cpu_results(lambda: ops.rope_matrix(x, y, one, zero)):
        try:
            assert_bit_exact(out, ref, f"cpu[{isa}]")
        except AssertionError as e:
            failed.append((isa, str(e)))
    assert not failed, failed


_FLUSH_SCRIPT = r"""
import sys
import torch
import npu_ops_transformer_ext as ext
pool_flush, call_flush = sys.argv[1] == "1", sys.argv[2] == "1"
torch.set_num_threads(2)
torch.set_flush_denormal(pool_flush)
a = torch.randn(4_000_000)
(a * a).sum()  # the worker thread starts here, with the calling thread's setting of now
# rope_matrix itself starting the pool: the same
ext.rope_matrix(torch.randn(2, 8, 1000, 128), ext.get_half_matrix(128), torch.zeros(1000, 128), torch.ones(1000, 128))
torch.set_flush_denormal(call_flush)  # the calling thread's setting only
# fp32 subnormal (about 1e-39; made from its bits, which no FTZ setting changes), 8 MB: the call
# runs on both threads
x = torch.full((2, 8, 1000, 128), 0x000AE398, dtype=torch.int32).view(torch.float32)
for mat in (ext.get_half_matrix(128), torch.eye(128) * 0.5):
    out = ext.rope_matrix(x, mat, torch.zeros(1000, 128), torch.ones(1000, 128))
    bits = out.view(torch.int32)  # counted on the bits: a float compare would follow the threads' DAZ
    print(int((bits == 0).sum()), int(bits.eq(x.view(torch.int32)).sum()))
"""


@pytest.mark.parametrize("pool_flush,call_flush", [(True, False), (False, True), (False, False), (True, True)])
def test_flush_denormal_follows_the_calling_thread(pool_flush, call_flush):
    # torch.set_flush_denormal sets the calling thread's FTZ/DAZ; worker threads keep theirs from
    # when they started. The kernel computes every row as the calling thread's setting says: with
    # cos = 1, sin = 0, a subnormal x gives x (not flushed) or +0 (flushed) in every element.
    from fresh_python import fresh_env, run_python

    if not torch.set_flush_denormal(False):
        pytest.skip("torch.set_flush_denormal is not supported on this CPU")
    out = run_python(_FLUSH_SCRIPT, str(int(pool_flush)), str(int(call_flush)), env=fresh_env())
    n = 2 * 8 * 1000 * 128
    for line in out.split("\n")[:2]:
        zeros, same = map(int, line.split())
        assert (zeros, same) == ((n, 0) if call_flush else (0, n)), (pool_flush, call_flush, line)
