"""The Ascend C kernel on the CPU twin: bit-exact against the CPU kernel and the fp32 reference.

Every case runs the kernel source of op_kernel/ with the host tiling of op_host/ on the simulated
910B (20 AI Cores = 20 cube + 40 vector cores unless stated), then checks the output and the
twin's report (every output byte written exactly once, per-core rows as the tiling assigns them,
UB within budget, flags balanced).
"""

from __future__ import annotations

import npu_ops_transformer_ext  # noqa: F401  (registers the ops)
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference

twin = pytest.importorskip("npu_ops_transformer_ext.twin")

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SPLITS = {"d64": [64], "d128": [128], "d44+44+40": [44, 44, 40]}
MODES = ("half", "interleave", "quarter", "interleave-half")
S_VALUES = (1, 7, 39, 40, 41, 78, 100, 1000, 1521)
BN_VALUES = (1, 3, 24)


def _layout_shape(layout: str, bn: int, s: int, d: int):
    b, n = {1: (1, 1), 3: (1, 3), 24: (2, 12)}[bn]
    return (b, n, s, d) if layout == "bnsd" else (b, s, n, d)


def _table_shape(layout: str, form: int, s: int, d: int):
    if layout == "bnsd":
        return (s, d) if form == 0 else (1, 1, s, d)
    return (s, 1, d) if form == 0 else (1, s, 1, d)


def _cases():
    # The full product the kernel contract names: every S class x B*N x D (incl. the composed
    # 44+44+40) x layout x dtype x table dtype; the mode and the table form rotate over it.
    import itertools

    product = itertools.product(
        S_VALUES, BN_VALUES, SPLITS, ("bnsd", "bsnd"), ("bf16", "fp16"), ("x", "fp32")
    )
    for i, (s, bn, split, layout, dt, tdt) in enumerate(product):
        mode = MODES[i % 4]
        form = (i // 4) % 2
        yield pytest.param(
            layout,
            bn,
            s,
            split,
            dt,
            tdt,
            mode,
            form,
            id=f"{layout}-bn{bn}-s{s}-{split}-{dt}-tab_{tdt}-{mode}-form{form}",
        )


def _inputs(layout, bn, s, split, dt, tdt, mode, form, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = sum(SPLITS[split])
    dtype = DT[dt]
    tdtype = dtype if tdt == "x" else torch.float32
    x = torch.randn(_layout_shape(layout, bn, s, d), generator=g).to(dtype)
    y = mode_matrix(mode, SPLITS[split], dtype=dtype)
    tshape = _table_shape(layout, form, s, d)
    sin = torch.randn(tshape, generator=g).to(tdtype)  # sin and cos differ: a swap is visible
    cos = torch.randn(tshape, generator=g).to(tdtype)
    return x, y, sin, cos


def _check_report(rep, x_rows_total):
    t = rep["tiling"]
    assert rep["out_write_count_min"] == 1 and rep["out_write_count_max"] == 1, (
        "every output byte exactly once"
    )
    aiv = [c for c in rep["cores"] if c["type"] == "AIV"]
    aic = [c for c in rep["cores"] if c["type"] == "AIC"]
    assert len(aic) == t["blockDim"] and len(aiv) == 2 * t["blockDim"]
    assert sum(c["rows"] for c in aiv) == x_rows_total
    assert sum(c["rows"] for c in aic) == x_rows_total
    for c in aic:  # each cube core multiplied exactly the rows its two vector cores wrote
        pair = [v for v in aiv if v["block"] == c["block"]]
        assert c["rows"] == sum(v["rows"] for v in pair)
        assert (
            c["flags_set"] == c["flags_waited"] == pair[0]["flags_set"] == pair[1]["flags_waited"]
        )
    for c in aiv:
        assert c["ub_peak_bytes"] == t["ubBytes"] <= t["ubBudget"]


@pytest.mark.parametrize("layout,bn,s,split,dt,tdt,mode,form", list(_cases()))
def test_twin_bit_exact(layout, bn, s, split, dt, tdt, mode, form):
    x, y, sin, cos = _inputs(layout, bn, s, split, dt, tdt, mode, form)
    before = [t.clone() for t in (x, y, sin, cos)]
    out, rep = twin.run(x, y, sin, cos, kernel="mix")
    assert rep["kernel_kind"] == "mix"
    expected = rope_matrix_reference(x, y, sin, cos)
    cpu = torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert torch.equal(out, cpu), "twin differs from the CPU kernel"
    for a, b in zip(before, (x, y, sin, cos)):
        assert torch.equal(a, b), "an input was modified"
    _check_report(rep, x.numel() // x.shape[-1])


@pytest.mark.parametrize(
    "soc,cubes", [("Ascend910B1", 24), ("Ascend910B2", 24), ("Ascend910B4", 20)]
)
def test_twin_core_counts_from_platform(soc, cubes):
    x, y, sin, cos = _inputs("bnsd", 3, 1521, "d128", "bf16", "x", "half", 1)
    out, rep = twin.run(x, y, sin, cos, soc=soc, kernel="mix")
    assert rep["block_dim"] == cubes
    assert len([c for c in rep["cores"] if c["type"] == "AIV"]) == 2 * cubes
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    _check_report(rep, x.numel() // x.shape[-1])


def test_twin_seed_shape_reduced_s():
    # The seed's [1, 24, 28800, 128] bf16 with [1, 1, S, D] tables, S cut to 2880.
    g = torch.Generator().manual_seed(1)
    s, d = 2880, 128
    x = torch.randn(1, 24, s, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("interleave", [d], dtype=torch.bfloat16)
    sin = torch.randn(1, 1, s, d, generator=g).to(torch.bfloat16)
    cos = torch.randn(1, 1, s, d, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos, kernel="mix")
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    _check_report(rep, 24 * s)
    # 2880 rows over 40 vector cores: 72 each, in one step of 144 rows per cube core (two UB chunks
    # of 40 and 32 rows per vector core).
    assert {c["rows"] for c in rep["cores"] if c["type"] == "AIV"} == {72 * 24}
    # GM traffic (docs/kernel.md): x read by cube and vector, x@y written and read once through
    # the workspace, out written once, every table row read once, y once per IterateAll: the Matmul
    # API keeps no copy of B in L1 between IterateAll calls (twin/include/twin/matmul_l1.h), and the
    # host's depthB1 = 1 keeps it for the whole of one. Each cube core runs 1 step x 24 heads = 24
    # IterateAll.
    xb = x.numel() * 2
    tot = {}
    for c in rep["cores"]:
        for kind in ("gm_read", "gm_write"):
            for name, n in c[kind].items():
                tot[(c["type"], kind, name)] = tot.get((c["type"], kind, name), 0) + n
    assert tot == {
        ("AIC", "gm_read", "x"): xb,
        ("AIC", "gm_read", "y"): 20 * 1 * 24 * d * d * 2,
        ("AIC", "gm_write", "workspace"): xb,
        ("AIV", "gm_read", "x"): xb,
        ("AIV", "gm_read", "workspace"): xb,
        ("AIV", "gm_read", "sin"): s * d * 2,
        ("AIV", "gm_read", "cos"): s * d * 2,
        ("AIV", "gm_write", "out"): xb,
    }


def _iterate_all_rows(t):
    # M of each IterateAll of a cube core: its rows in steps of stepRows, times the heads per step.
    rows, ms = t["sBase"], []
    while rows > 0:
        ms.append(min(rows, t["stepRows"]) * t["innerChunk"])
        rows -= min(rows, t["stepRows"])
    return ms * (t["outer"] * -(-t["inner"] // t["innerChunk"]))


@pytest.mark.parametrize("depth_b1", [None, 2])
def test_twin_y_reads_per_iterate_all(depth_b1):
    # One K block of y (baseK = D). With the host's depthB1 = 1 the Matmul API's NORMAL cube-in
    # buffer keeps y in L1 for the whole IterateAll ("k full load"): one read per IterateAll. With
    # depthB1 = 2 it double-buffers over M and caches nothing ("k full load, db on m axis"): y is
    # read again for every baseM block of M. S = 6400, D = 64: 320 rows per cube core.
    g = torch.Generator().manual_seed(3)
    s, d = 6400, 64
    t = twin.tiling(1, s, 1, d)
    base_m = t["cube"]["baseM"]
    assert t["cube"]["depthB1"] == 1 and t["cube"]["baseK"] == d and t["sRem"] == 0
    ms = _iterate_all_rows(t)
    assert any(m > base_m for m in ms)  # the case under test: more than one M block per IterateAll
    x = torch.randn(1, 1, s, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(s, d, generator=g).to(torch.bfloat16)
    cos = torch.randn(s, d, generator=g).to(torch.bfloat16)
    patch = {} if depth_b1 is None else {"cube.depthB1": depth_b1}
    out, rep = twin._run(x, y, sin, cos, soc="Ascend910B3", tiling_patch=patch, kernel="mix")
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    reads = len(ms) if depth_b1 is None else sum(-(-m // base_m) for m in ms)
    assert [c["gm_read"]["y"] for c in rep["cores"] if c["type"] == "AIC"] == [reads * d * d * 2] * t["blockDim"]


@pytest.mark.parametrize(
    "layout,bn,s,d,expect",
    [
        # 200 rows per cube core: one step of 240 rows, 3 UB chunks per vector core, 2 groups of 10
        ("bnsd", 20, 4000, 128, {"chunkRows": 40, "stepRows": 240, "outerChunk": 10}),
        # 600 rows per cube core: steps of 560 and 40 rows, groups of 7, 7 and 6 heads
        ("bnsd", 20, 12000, 128, {"chunkRows": 40, "stepRows": 560, "outerChunk": 7}),
        # BSND, 3 inner heads: one step of 324 rows, chunks of 81 and 19 rows per vector core
        ("bsnd", 3, 4000, 64, {"chunkRows": 81, "stepRows": 324, "innerChunk": 3}),
    ],
)
def test_twin_steps_of_several_chunks(layout, bn, s, d, expect):
    # A step spans several UB chunks of each vector core (the timing model's change, docs/kernel.md):
    # bit-exact with the CPU kernel, and the tables are read once per step or once per head group and
    # chunk.
    g = torch.Generator().manual_seed(7)
    shape = (1, bn, s, d) if layout == "bnsd" else (1, s, bn, d)
    x = torch.randn(shape, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    tshape = _table_shape(layout, 1, s, d)
    sin = torch.randn(tshape, generator=g).to(torch.bfloat16)
    cos = torch.randn(tshape, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos, kernel="mix")
    t = rep["tiling"]
    for k, v in expect.items():
        assert t[k] == v, (k, t)
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    _check_report(rep, x.numel() // x.shape[-1])
    groups = -(-t["outer"] // t["outerChunk"]) * -(-t["inner"] // t["innerChunk"])
    heads = t["outer"] * t["inner"]  # a core's "rows" count x rows of D elements over all heads
    for c in rep["cores"]:
        if c["type"] != "AIC":
            continue
        rows, step_rows = c["rows"] // heads, []
        while rows > 0:
            step_rows.append(min(rows, t["stepRows"]))
            rows -= step_rows[-1]
        for sub in (0, 1):
            v = next(a for a in rep["cores"] if a["type"] == "AIV" and a["block"] == c["block"] and a["sub"] == sub)
            assert v["flags_waited"] == len(step_rows) * groups
            # (a step of one row goes to both vector cores, each with half of the heads)
            halves = [1 if n == 1 else (n + 1) // 2 if sub == 0 else n // 2 for n in step_rows]
            # one load per step when the core's half is one chunk, else one per chunk and group
            rows_read = sum(h * (groups if h > t["chunkRows"] else 1) for h in halves)
            assert v["gm_read"].get("sin", 0) == rows_read * d * 2


@pytest.mark.parametrize(
    "shape,tshape,cores,rows",
    [
        ((8, 32, 1, 128), (1, 128), 1, [[128, 128]]),  # BNSD decode, B = 8: the 256 heads in two
        ((1, 3, 1, 64), (1, 64), 1, [[2, 1]]),  # an odd head count: the first share one larger
        ((1, 1, 1, 64), (1, 64), 1, [[1, 0]]),  # one head: the second vector core has none
        ((2, 1, 32, 128), (1, 1, 128), 1, [[32, 32]]),  # BSND decode: 64 heads
        ((2, 1, 32, 128), (32, 128), 1, [[32, 32]]),  # BSND, tables over N (S = 32): 2 outer heads, one each
        ((1, 1, 32, 128), (32, 128), 1, [[16, 16]]),  # ... B = 1: one outer head, by inner heads
        ((1, 3, 4, 64), (3, 1, 64), 2, [[4, 4], [2, 2]]),  # S = 3, BSND: core 0 splits 2 rows, core 1 its one
        # row's 4 heads
    ],
)
def test_twin_decode_step_shares_heads_between_the_vector_cores(shape, tshape, cores, rows):
    # A step of one S row goes to both vector cores of its cube core, each with half of the heads
    # (it went to sub-block 0 alone): bit-exact with the CPU kernel, every output written once.
    # `cores` AI Cores (max_block_dim), so that the heads are not split over more of them.
    g = torch.Generator().manual_seed(11)
    d = shape[-1]
    x = torch.randn(shape, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(tshape, generator=g).to(torch.bfloat16)
    cos = torch.randn(tshape, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos, kernel="mix", max_block_dim=cores)
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    _check_report(rep, x.numel() // d)
    got = [[c["rows"] for c in sorted((a for a in rep["cores"] if a["type"] == "AIV" and a["block"] == b),
                                      key=lambda a: a["sub"])] for b in range(rep["tiling"]["blockDim"])]
    assert got == rows


@pytest.mark.parametrize(
    "shape,tshape,soc,heads",
    [
        ((8, 32, 1, 128), (1, 128), "Ascend910B3", [13] * 16 + [12] * 4),  # BNSD decode, B = 8: 256 heads
        ((1, 32, 1, 128), (1, 128), "Ascend910B1", [2] * 8 + [1] * 16),  # B = 1: 32 heads on 24 cores
        ((1, 5, 1, 64), (1, 64), "Ascend910B3", [1] * 5),  # fewer heads than cores: one each
        ((2, 1, 8, 64), (1, 1, 64), "Ascend910B3", [1] * 16),  # BSND decode: B * N heads
        ((1, 7, 4, 64), (4, 64), "Ascend910B3", [1] * 14),  # S = 4: 2 S-cores x 7 head groups
    ],
)
def test_twin_short_s_splits_heads_over_the_ai_cores(shape, tshape, soc, heads):
    # S = 1 (or any S up to the AI Core count) with a dense mat: the outer heads are split over the
    # AI Cores (oGroups), S over sCores: bit-exact for a signed permutation, within bf16 rounding
    # for a dense mat, every output written once, each core's vector rows = its heads x its S rows.
    g = torch.Generator().manual_seed(12)
    d = shape[-1]
    x = torch.randn(shape, generator=g).to(torch.bfloat16)
    sin = torch.randn(tshape, generator=g).to(torch.bfloat16)
    cos = torch.randn(tshape, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos, kernel="mix", soc=soc)
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    _check_report(rep, x.numel() // d)
    t = rep["tiling"]
    assert t["blockDim"] == len(heads) == t["sCores"] * t["oGroups"]
    s_rows = [t["sBase"] + (1 if b // t["oGroups"] < t["sRem"] else 0) for b in range(t["blockDim"])]
    per_core = [sum(c["rows"] for c in rep["cores"] if c["type"] == "AIV" and c["block"] == b)
                for b in range(t["blockDim"])]
    inner = x.numel() // d // (t["outer"] * t["s"])
    assert per_core == [h * r * inner for h, r in zip(heads, s_rows)]
    dense = (torch.randn(d, d, generator=g) / 8).to(torch.bfloat16)
    out, rep = twin.run(x, dense, sin, cos, soc=soc)
    assert rep["kernel_kind"] == "mix" and rep["tiling"]["blockDim"] == len(heads)
    torch.testing.assert_close(out, rope_matrix_reference(x, dense, sin, cos), rtol=1.6e-2, atol=2e-2)


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_twin_dense_y_within_tolerance(dt):
    g = torch.Generator().manual_seed(2)
    dtype = DT[dt]
    x = torch.randn(1, 3, 41, 64, generator=g).to(dtype)
    y = (torch.randn(64, 64, generator=g) / 8).to(dtype)
    sin = torch.randn(41, 64, generator=g).to(dtype)
    cos = torch.randn(41, 64, generator=g).to(dtype)
    out, rep = twin.run(x, y, sin, cos)
    assert rep["kernel_kind"] == "mix"  # a dense y always takes the MIX kernel
    tol = {"bf16": {"rtol": 1.6e-2, "atol": 2e-2}, "fp16": {"rtol": 2e-3, "atol": 2e-3}}[dt]
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), **tol)
    torch.testing.assert_close(
        out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos), **tol
    )


def test_twin_fp32_x():
    x, y, sin, cos = _inputs("bnsd", 3, 41, "d64", "fp32", "x", "half", 0)
    out, rep = twin.run(x, y, sin, cos, kernel="mix")
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    _check_report(rep, x.numel() // x.shape[-1])


@pytest.mark.parametrize("kernel", ["perm", "mix"])
def test_twin_views_honour_offsets_and_strides(kernel):
    g = torch.Generator().manual_seed(3)
    big = torch.randn(3, 2, 41, 128, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [128], dtype=torch.bfloat16)
    sin = torch.randn(41, 128, generator=g).to(torch.bfloat16)
    cos = torch.randn(41, 128, generator=g).to(torch.bfloat16)
    for x in (big[1:], big[:, :, 1:40], big.transpose(1, 2).contiguous().transpose(1, 2)):
        out, rep = twin.run(x, y, sin[: x.shape[2]], cos[: x.shape[2]], kernel=kernel)
        assert rep["kernel_kind"] == kernel
        torch.testing.assert_close(
            out, rope_matrix_reference(x, y, sin[: x.shape[2]], cos[: x.shape[2]]), rtol=0, atol=0
        )


@pytest.mark.parametrize("kernel", ["perm", "mix"])
def test_twin_float_y_exact_and_mixed_table_dtypes(kernel):
    x, y, sin, cos = _inputs("bnsd", 3, 41, "d128", "bf16", "x", "half", 0)
    out, _ = twin.run(x, y.float(), sin, cos.float(), kernel=kernel)
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", ["perm", "mix"])
def test_twin_one_table_constant_the_other_along_s(kernel):
    # A table constant over every row ([D]) with the other along S ([S, D]): each form the launcher
    # takes alone, so the pair too (the constant one expanded), on both kernels, in either role.
    x, y, sin, cos = _inputs("bnsd", 3, 41, "d128", "bf16", "x", "half", 0)
    for s_, c_ in ((sin, cos[5]), (sin[7], cos)):
        out, rep = twin.run(x, y, s_, c_, kernel=kernel)
        assert rep["kernel_kind"] == kernel
        want = torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, s_, c_)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        torch.testing.assert_close(out, rope_matrix_reference(x, y, s_, c_), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", ["perm", "mix"])
def test_twin_sees_negated_views_and_zero_tensors_as_the_op_does(kernel):
    # The op gets a negated view's values and an efficient zero tensor as zeros through the
    # dispatcher's fallbacks; twin.run, called directly, resolves them itself (it computed on the
    # un-negated data, and dereferenced the zero tensor's null pointer).
    op = torch.ops.npu_ops_transformer_ext.rope_matrix
    x, y, sin, cos = _inputs("bnsd", 3, 41, "d128", "bf16", "x", "half", 0)
    neg = torch._neg_view
    zero = torch._efficientzerotensor(sin.shape, dtype=sin.dtype)
    for args in ((neg(x), y, sin, cos), (x, neg(y), sin, cos), (x, y, neg(sin), cos), (x, y, sin, neg(cos)),
                 (x, y, zero, cos), (x, y, sin, zero)):
        out, rep = twin.run(*args, kernel=kernel)
        assert rep["kernel_kind"] == kernel
        want = rope_matrix_reference(*(a.resolve_neg() if not a._is_zerotensor() else torch.zeros_like(sin)
                                       for a in args))
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        torch.testing.assert_close(out, op(*args), rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (2, 0, 8), (0, 128)])
def test_twin_empty_x_any_d_as_on_the_cpu(shape):
    # An empty x has an empty result whatever D is, as the CPU op gives (D >= 16 applies only when
    # there is something to compute).
    d = shape[-1]
    x = torch.empty(shape, dtype=torch.bfloat16)
    y = torch.zeros(d, d, dtype=torch.bfloat16)
    t = torch.empty(d, dtype=torch.bfloat16)
    out, rep = twin.run(x, y, t, t)
    assert out.shape == x.shape and out.dtype == x.dtype and rep == {}
    assert torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, t, t).shape == x.shape


def test_twin_float_y_with_nan_is_taken_as_the_cpu_takes_it():
    # x.dtype holds NaN exactly, so a float32 mat with a NaN entry passes the launcher's exactness
    # check as it passes the shared validator's; the MIX kernel's column of that entry is NaN.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 2, 9, 64, generator=g).to(torch.bfloat16)
    y = (torch.randn(64, 64, generator=g) / 8).to(torch.bfloat16).float()
    y[3, 5] = float("nan")
    sin = torch.randn(9, 64, generator=g).to(torch.bfloat16)
    cos = torch.randn(9, 64, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos)
    assert rep["kernel_kind"] == "mix"
    assert out[..., 5].isnan().all() and not out[..., :5].isnan().any() and not out[..., 6:].isnan().any()
    same, _ = twin.run(x, y.to(torch.bfloat16), sin, cos)
    torch.testing.assert_close(out, same, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(
        out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos), rtol=1.6e-2, atol=2e-2, equal_nan=True
    )


@pytest.mark.parametrize(
    "layout,bn,s,d,slot_bytes,expect",
    [
        # BNSD, 24 heads over 3 head groups of cores, 8 each: two outer heads per step (4 groups per row chunk)
        ("bnsd", 24, 41, 128, 5000, {"oGroups": 3, "outerChunk": 2, "innerChunk": 1}),
        # BNSD, 3 heads, last group shorter
        ("bnsd", 3, 100, 64, 3 * 2 * 3 * 64 * 2 - 2, {"outerChunk": 2, "innerChunk": 1}),
        # BSND, 12 heads per S row: one row per vector core and 9 + 3 inner heads per step
        ("bsnd", 24, 41, 128, 5000, {"chunkRows": 1, "outerChunk": 1, "innerChunk": 9}),
        # BSND: rows per chunk shrink, all inner heads per step
        ("bsnd", 3, 1000, 64, 6 * 3 * 64 * 2, {"chunkRows": 3, "innerChunk": 3}),
    ],
)
def test_twin_bounded_workspace_head_groups(layout, bn, s, d, slot_bytes, expect):
    # Small slots make small shapes go through the head groups and inner slices that a 1 MiB slot
    # uses for large ones; the result stays bit-exact with the CPU kernel.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(_layout_shape(layout, bn, s, d), generator=g).to(torch.bfloat16)
    y = mode_matrix("interleave", [d], dtype=torch.bfloat16)
    tshape = _table_shape(layout, 0, s, d)
    sin = torch.randn(tshape, generator=g).to(torch.bfloat16)
    cos = torch.randn(tshape, generator=g).to(torch.bfloat16)
    out, rep = twin._run(x, y, sin, cos, soc="Ascend910B3", slot_bytes=slot_bytes, kernel="mix")
    t = rep["tiling"]
    for k, v in expect.items():
        assert t[k] == v, (k, t)
    assert t["slotElems"] * 2 <= slot_bytes
    assert rep["workspace_bytes"] == (16 << 20) + t["blockDim"] * 2 * t["slotElems"] * 2
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    _check_report(rep, x.numel() // x.shape[-1])
