"""Unit tests of the pure host tiling (op_host/rope_matrix_tiling.cpp), field by field.

The row assignment is recomputed here from the documented split (inc/rope_matrix_tiling.h) and
checked for coverage: every S row belongs to exactly one vector core, each cube core's rows are
exactly the union of its two vector cores' rows.
"""

from __future__ import annotations

import pytest

twin = pytest.importorskip("npu_ops_transformer_ext.twin")
_twin = twin._twin

UB_BUDGET = 196608 - 256 - 8192  # GetCoreMemSize(UB) on 910B minus the 8 KiB API reserve


def _rows(t):
    """{cube b: [rows]}, {vector 2b+s: [rows]} from the tiling fields, as the kernel walks them."""
    cube, vec = {}, {}
    per = 2 * t["chunkRows"]
    for b in range(t["blockDim"]):
        begin = b * t["sBase"] + min(b, t["sRem"])
        count = t["sBase"] + (1 if b < t["sRem"] else 0)
        cube[b] = list(range(begin, begin + count))
        steps = -(-count // per)
        for sub in (0, 1):
            rows = []
            for step in range(steps):
                n = min(per, count - step * per)
                h0 = (n + 1) // 2
                first, cnt = (0, h0) if sub == 0 else (h0, n - h0)
                rows += list(range(begin + step * per + first, begin + step * per + first + cnt))
            vec[2 * b + sub] = rows
    return cube, vec


S_SWEEP = list(range(1, 130)) + [199, 200, 201, 999, 1000, 1001, 1521, 1522, 28799, 28800, 100003]


@pytest.mark.parametrize("soc,aic", [("Ascend910B3", 20), ("Ascend910B1", 24)])
def test_every_row_exactly_once(soc, aic):
    for s in S_SWEEP:
        t = twin.tiling(2, s, 1, 128, soc=soc)
        assert t["aicNum"] == aic and t["aivNum"] == 2 * aic
        assert t["blockDim"] == min(aic, -(-s // 2)), s
        cube, vec = _rows(t)
        all_rows = sorted(r for rows in vec.values() for r in rows)
        assert all_rows == list(range(s)), f"S={s}: rows not covered exactly once"
        for b, rows in cube.items():
            assert rows, f"S={s}: cube core {b} has no rows"
            assert sorted(vec[2 * b] + vec[2 * b + 1]) == rows, (
                f"S={s}: cube {b} != union of its vector cores"
            )
        counts = [len(r) for r in vec.values()]
        assert max(counts) - min(counts) <= t["chunkRows"] + 1, s
        cube_counts = [len(r) for r in cube.values()]
        assert max(cube_counts) - min(cube_counts) <= 1, s


@pytest.mark.parametrize("d", [16, 40, 44, 64, 128, 130, 256, 512, 1024, 3072])
@pytest.mark.parametrize(
    "x_dtype,table_dtype",
    [
        ("bfloat16", "bfloat16"),
        ("bfloat16", "float32"),
        ("float16", "float16"),
        ("float32", "float32"),
    ],
)
def test_ub_within_budget_and_aligned(d, x_dtype, table_dtype):
    t = twin.tiling(24, 28800, 1, d, x_dtype=x_dtype, table_dtype=table_dtype)
    xb = 4 if x_dtype == "float32" else 2
    tb = 4 if table_dtype == "float32" else xb
    assert t["ubBudget"] == UB_BUDGET
    assert t["xBytes"] == xb and t["tableBytes"] == tb
    assert (
        t["dPad"] >= d
        and (t["dPad"] * xb) % 32 == 0
        and (t["dPad"] * tb) % 32 == 0
        and (t["dPad"] * 4) % 32 == 0
    )
    assert t["dPad"] - d < 32 // min(xb, tb)
    assert t["chunkRows"] >= 1
    assert (
        t["ubBytes"] == _twin.ub_bytes_per_element(xb, tb) * t["dPad"] * t["chunkRows"] <= UB_BUDGET
    )
    # the chunk is the largest the budget allows (or all the rows a vector core can get)
    per_row = _twin.ub_bytes_per_element(xb, tb) * t["dPad"]
    assert t["chunkRows"] == min(UB_BUDGET // per_row, -(-(28800 // 20) // 2), 4095)
    c = t["cube"]
    assert c["M"] == c["singleCoreM"] == 2 * t["chunkRows"] and c["N"] == c["Ka"] == d
    assert c["baseM"] % 16 == 0 and c["baseN"] % 16 == 0 and c["baseK"] % 8 == 0
    assert (
        c["baseM"] * c["baseK"] * xb * c["dbL0A"] <= 65536
        and c["baseM"] * c["baseN"] * 4 * c["dbL0C"] <= 131072
    )


def test_seed_shape_fields():
    t = twin.tiling(24, 28800, 1, 128)
    assert (t["blockDim"], t["sBase"], t["sRem"], t["chunkRows"], t["dPad"]) == (
        20,
        1440,
        0,
        40,
        128,
    )
    assert t["ubBytes"] == 36 * 128 * 40 == 184320
    assert t["headStride"] == 2 * 40 * 128 and t["slotElems"] == 24 * t["headStride"]
    assert t["userWorkspace"] == 20 * 2 * t["slotElems"] * 2
    assert t["workspaceBytes"] == (16 << 20) + t["userWorkspace"]


def test_bsnd_view():
    t = twin.tiling(2, 41, 12, 128)
    assert (t["outer"], t["s"], t["inner"]) == (2, 41, 12)
    assert t["headStride"] == 2 * t["chunkRows"] * 12 * 128
    assert t["cube"]["M"] == 2 * t["chunkRows"] * 12


def test_no_32bit_overflow_beyond_2_pow_31_elements():
    # B*N*S*D = 64 * 2^20 * 128 = 2^33 elements.
    outer, s, d = 64, 1 << 20, 128
    t = twin.tiling(outer, s, 1, d)
    assert outer * s * d >= 2**31
    assert t["s"] == s and t["outer"] == outer
    assert t["sBase"] * t["blockDim"] + t["sRem"] == s
    assert t["slotElems"] == outer * t["headStride"]
    assert t["userWorkspace"] == t["blockDim"] * 2 * t["slotElems"] * 2
    # The largest GM offset the kernel forms (last head, last row) needs 64 bits.
    last = ((outer - 1) * s + (s - 1)) * d
    assert last > 2**32 and last < 2**63


@pytest.mark.parametrize(
    "args,match",
    [
        ({"d": 8}, r"D = 8 is below the minimum 16"),
        (
            {"d": 8192},
            (
                r"D = 8192 \(row pitch 8192\) needs 294912 UB bytes per row, more than the UB budget "
                r"of 188160 bytes; the largest D served with these dtypes is 5216"
            ),
        ),
        ({"soc": "Ascend310P"}, r"unknown SoC 'Ascend310P'"),
        ({"s": 0}, r"empty problem"),
    ],
)
def test_impossible_shapes_fail_loudly_with_numbers(args, match):
    kw = {"outer": 1, "s": 16, "inner": 1, "d": 128}
    kw.update(args)
    soc = kw.pop("soc", "Ascend910B3")
    with pytest.raises(ValueError, match=match):
        twin.tiling(kw["outer"], kw["s"], kw["inner"], kw["d"], soc=soc)


def test_max_block_dim_caps_cores():
    t = twin.tiling(1, 1000, 1, 64, max_block_dim=4)
    assert t["blockDim"] == 4
    _cube, vec = _rows(t)
    assert sorted(r for rows in vec.values() for r in rows) == list(range(1000))


@pytest.mark.parametrize(
    "x_dtype,table_dtype,dmax",
    [("bfloat16", "bfloat16", 5216), ("float16", "float32", 5216), ("float32", "float32", 3920)],
)
def test_largest_d_is_served_and_one_more_is_refused(x_dtype, table_dtype, dmax):
    t = twin.tiling(1, 16, 1, dmax, x_dtype=x_dtype, table_dtype=table_dtype)
    assert t["chunkRows"] == 1 and t["ubBytes"] <= UB_BUDGET
    with pytest.raises(ValueError, match=f"the largest D served with these dtypes is {dmax}"):
        twin.tiling(1, 16, 1, dmax + 1, x_dtype=x_dtype, table_dtype=table_dtype)


@pytest.mark.parametrize(
    "x_dtype,expected", [("bfloat16", "DT_BFLOAT16"), ("float16", "DT_FLOAT16"), ("float32", "DT_FLOAT")]
)
def test_matmul_tiled_as_x_dtype(x_dtype, expected):
    # The host passes x's own type to MultiCoreMatmulTiling (fp16 is not tiled as bf16).
    assert twin.tiling(2, 64, 4, 128, x_dtype=x_dtype, table_dtype=x_dtype)["cube"]["aType"] == expected
