"""Unit tests of the pure host tiling (op_host/rope_matrix_tiling.cpp), field by field.

The row assignment is recomputed here from the documented split (inc/rope_matrix_tiling.h, _cells) and
checked for coverage: every (outer head, S row, inner head) belongs to exactly one vector core,
each cube core's are exactly the union of its two vector cores'.
"""

from __future__ import annotations

import pytest

twin = pytest.importorskip("npu_ops_transformer_ext.twin")
_twin = twin._twin

UB_BUDGET = 196608 - 256 - 8192  # GetCoreMemSize(UB) on 910B minus the 8 KiB API reserve


def _cells(t):
    """{cube b: [(outer head, S row, inner head)]}, {vector 2b+s: [...]}: every x row each core
    computes, walked as the kernel walks them (CubeRows, CubeHeads, HeadGroup, SubRows, SubHeads of
    inc/rope_matrix_tiling.h, recomputed here from their documentation)."""
    cube, vec = {}, {}
    per, inner, oc, ic = t["stepRows"], t["inner"], t["outerChunk"], t["innerChunk"]
    for b in range(t["blockDim"]):
        sc, og = divmod(b, t["oGroups"])
        s0 = sc * t["sBase"] + min(sc, t["sRem"])
        rows = t["sBase"] + (1 if sc < t["sRem"] else 0)
        o_begin = og * t["oBase"] + min(og, t["oRem"])
        heads = t["oBase"] + (1 if og < t["oRem"] else 0)
        gi = -(-inner // ic)
        groups = -(-heads // oc) * gi
        cube[b], vec[2 * b], vec[2 * b + 1] = [], [], []
        for step in range(-(-rows // per)):
            n = min(per, rows - step * per)
            srow = s0 + step * per
            for g in range(groups):
                o0 = o_begin + (g // gi) * oc
                on = min(oc, o_begin + heads - o0)
                i0 = (g % gi) * ic
                in_ = min(ic, inner - i0)
                cube[b] += [(o, r, i) for o in range(o0, o0 + on) for r in range(srow, srow + n)
                            for i in range(i0, i0 + in_)]
                for sub in (0, 1):
                    if n == 1:  # SubHeads: both take the row, each half of the heads
                        if on > 1:
                            h0 = (on + 1) // 2
                            os_, ons = (o0, h0) if sub == 0 else (o0 + h0, on - h0)
                            is_, ins = i0, in_
                        else:
                            h0 = (in_ + 1) // 2
                            is_, ins = (i0, h0) if sub == 0 else (i0 + h0, in_ - h0)
                            os_, ons = o0, on
                        first, cnt = 0, 1
                    else:  # SubRows
                        h0 = (n + 1) // 2
                        first, cnt = (0, h0) if sub == 0 else (h0, n - h0)
                        os_, ons, is_, ins = o0, on, i0, in_
                    vec[2 * b + sub] += [(o, r, i) for o in range(os_, os_ + ons)
                                         for r in range(srow + first, srow + first + cnt)
                                         for i in range(is_, is_ + ins)]
    return cube, vec


def _split(cores, s, outer, max_s):
    """(sCores, oGroups) by the documented rule (op_host/rope_matrix_tiling.h, split_cores): of
    every sCores with oGroups = min(outer, cores // sCores), the split whose busiest core has the
    least rows * (heads + 1), ties to more S-cores."""
    best, best_cost = None, None
    for sc in range(min(max_s, cores), 0, -1):
        og = min(outer, cores // sc)
        rows, heads = -(-s // sc), -(-outer // og)
        if best_cost is None or rows * (heads + 1) < best_cost:
            best_cost, best = rows * (heads + 1), (sc, og)
    return best


def _expected_split(outer, s, aic):
    return _split(aic, s, outer, -(-s // 2))


def _busiest(s, outer, sc, og):
    return -(-s // sc) * (-(-outer // og) + 1)


@pytest.mark.parametrize("cores", [1, 2, 3, 7, 20, 24, 40, 48])
def test_split_cores_is_the_least_loaded_busiest_core(cores):
    # Against every (sCores, oGroups) with sCores * oGroups <= cores: no split gives the busiest core
    # less work; the old rule (S first, the heads over what S leaves) is never better, and is kept
    # when nothing is better.
    for s in list(range(1, 60)) + [99, 100, 101, 1000, 28800]:
        for outer in (1, 2, 3, 5, 8, 24, 32, 64, 97):
            for max_s in (s, -(-s // 2)):
                sc, og = _split(cores, s, outer, max_s)
                assert 1 <= sc <= min(max_s, cores) and 1 <= og <= outer and sc * og <= cores
                cost = _busiest(s, outer, sc, og)
                every = [_busiest(s, outer, a, b) for a in range(1, min(max_s, cores) + 1)
                         for b in range(1, min(outer, cores // a) + 1)]
                assert cost == min(every), (s, outer, max_s)
                old_sc = min(cores, max_s)
                old = (old_sc, min(outer, cores // old_sc))
                assert cost <= _busiest(s, outer, *old)
                if cost == _busiest(s, outer, *old):
                    assert (sc, og) == old


S_SWEEP = list(range(1, 130)) + [199, 200, 201, 999, 1000, 1001, 1521, 1522, 28799, 28800, 100003]


@pytest.mark.parametrize("soc,aic", [("Ascend910B3", 20), ("Ascend910B1", 24)])
def test_every_row_exactly_once(soc, aic):
    for s in S_SWEEP:
        t = twin.tiling(2, s, 1, 128, soc=soc)
        assert t["aicNum"] == aic and t["aivNum"] == 2 * aic
        s_cores, o_groups = _expected_split(2, s, aic)
        assert (t["sCores"], t["oGroups"]) == (s_cores, o_groups), s
        assert t["blockDim"] == s_cores * o_groups, s
        cube, vec = _cells(t)
        every = sorted((o, r, 0) for o in range(2) for r in range(s))
        assert sorted(c for cells in vec.values() for c in cells) == every, f"S={s}: rows not covered exactly once"
        for b, cells in cube.items():
            assert cells, f"S={s}: cube core {b} has no rows"
            assert sorted(vec[2 * b] + vec[2 * b + 1]) == sorted(cells), (
                f"S={s}: cube {b} != union of its vector cores"
            )
        # the S rows of each core (a row of one step shared by heads counts on both vector cores)
        counts = [len({r for _, r, _ in cells}) for cells in vec.values()]
        assert max(counts) - min(counts) <= t["chunkRows"] + 1, s
        cube = {b: {r for _, r, _ in cells} for b, cells in cube.items()}
        cube_counts = [len(r) for r in cube.values()]
        assert max(cube_counts) - min(cube_counts) <= 1, s


@pytest.mark.parametrize("soc,aic", [("Ascend910B3", 20), ("Ascend910B1", 24)])
@pytest.mark.parametrize("outer", [1, 2, 3, 7, 19, 20, 21, 32, 41, 100])
@pytest.mark.parametrize("s,inner", [(1, 1), (1, 3), (2, 1), (3, 2), (5, 1), (7, 1), (16, 1), (39, 1), (40, 2), (41, 1)])
def test_every_head_row_exactly_once(soc, aic, outer, s, inner):
    # S up to the cube core count: the outer heads are split over the cores too (oGroups > 1).
    t = twin.tiling(outer, s, inner, 64, soc=soc)
    s_cores, o_groups = _expected_split(outer, s, aic)
    assert (t["sCores"], t["oGroups"], t["blockDim"]) == (s_cores, o_groups, s_cores * o_groups)
    assert t["blockDim"] <= aic
    cube, vec = _cells(t)
    every = sorted((o, r, i) for o in range(outer) for r in range(s) for i in range(inner))
    assert sorted(c for cells in vec.values() for c in cells) == every, "rows not covered exactly once"
    for b, cells in cube.items():
        assert cells, f"cube core {b} has nothing to do"
        assert sorted(vec[2 * b] + vec[2 * b + 1]) == sorted(cells), f"cube {b} != union of its vector cores"
    heads = [t["oBase"] + (1 if og < t["oRem"] else 0) for og in range(t["oGroups"])]
    assert max(heads) - min(heads) <= 1 and min(heads) >= 1
    assert t["outerChunk"] <= max(heads)


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
    assert c["M"] == c["singleCoreM"] == t["stepRows"] and c["N"] == c["Ka"] == d
    assert t["stepRows"] % (2 * t["chunkRows"]) == 0
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
    # a step: 560 rows (7 chunks of 40 per vector core, >= 512 rows per IterateAll), 6 heads (a 1 MiB
    # slot holds 7; four equal groups)
    assert (t["stepRows"], t["outerChunk"]) == (560, 6)
    assert t["headStride"] == 560 * 128 and t["slotElems"] == 6 * t["headStride"]
    assert t["userWorkspace"] == 20 * 2 * t["slotElems"] * 2
    assert t["workspaceBytes"] == (16 << 20) + t["userWorkspace"]


def test_bsnd_view():
    t = twin.tiling(2, 41, 12, 128)
    assert (t["outer"], t["s"], t["inner"]) == (2, 41, 12)
    assert t["headStride"] == t["stepRows"] * 12 * 128
    assert t["cube"]["M"] == t["stepRows"] * 12


def test_no_32bit_overflow_beyond_2_pow_31_elements():
    # B*N*S*D = 64 * 2^20 * 128 = 2^33 elements.
    outer, s, d = 64, 1 << 20, 128
    t = twin.tiling(outer, s, 1, d)
    assert outer * s * d >= 2**31
    assert t["s"] == s and t["outer"] == outer
    assert t["sBase"] * t["sCores"] + t["sRem"] == s
    assert t["slotElems"] == t["outerChunk"] * t["headStride"]
    assert t["userWorkspace"] == t["blockDim"] * 2 * t["slotElems"] * 2
    # The largest GM offset the kernel forms (last head, last row) needs 64 bits.
    last = ((outer - 1) * s + (s - 1)) * d
    assert last > 2**32 and last < 2**63


SLOT_BYTES = 1 << 20  # one workspace slot at most; two per AI Core
SYS_WS = 16 << 20


def _heads(t):
    """(outer, inner) heads that the head groups of every cube core's outer heads cover, each exactly once."""
    gi = -(-t["inner"] // t["innerChunk"])
    seen = set()
    for og in range(t["oGroups"]):
        o_begin = og * t["oBase"] + min(og, t["oRem"])
        heads = t["oBase"] + (1 if og < t["oRem"] else 0)
        go = -(-heads // t["outerChunk"])
        for g in range(go * gi):
            o0, i0 = o_begin + (g // gi) * t["outerChunk"], (g % gi) * t["innerChunk"]
            for o in range(o0, min(o_begin + heads, o0 + t["outerChunk"])):
                for i in range(i0, min(t["inner"], i0 + t["innerChunk"])):
                    assert (o, i) not in seen
                    seen.add((o, i))
    return seen


@pytest.mark.parametrize(
    "outer,s,inner,d,x_dtype",
    [
        (24, 28800, 1, 128, "bfloat16"),  # the seed shape: 560 rows x 6 heads per step
        (2048, 1024, 1, 128, "bfloat16"),  # B*N = 2048: 1.06 GiB before the bound
        (1, 28800, 2048, 128, "bfloat16"),  # BSND with many heads: chunk rows shrink
        (1, 64, 8192, 128, "float32"),  # one S row is 4 MiB: the inner heads are split
        (1, 3, 100000, 16, "bfloat16"),
        (1 << 14, 1 << 10, 1, 128, "bfloat16"),  # 2^31 elements
        (3, 1 << 20, 1000, 64, "float16"),  # 2^37.5 elements, BSND
        (7, 1, 1, 5216, "bfloat16"),  # widest row
        (1, 100003, 1, 3920, "float32"),
    ],
)
def test_workspace_bounded_for_any_shape(outer, s, inner, d, x_dtype):
    t = twin.tiling(outer, s, inner, d, x_dtype=x_dtype)
    xb = 4 if x_dtype == "float32" else 2
    assert t["slotElems"] * xb <= SLOT_BYTES
    assert t["userWorkspace"] == t["blockDim"] * 2 * t["slotElems"] * xb <= t["blockDim"] * 2 * SLOT_BYTES
    assert t["workspaceBytes"] <= SYS_WS + t["aicNum"] * (2 << 20)
    assert t["headStride"] == t["stepRows"] * t["innerChunk"] * d
    assert t["slotElems"] == t["outerChunk"] * t["headStride"]
    # one step of the largest head group fits the slot; the matmul's M is that step's rows
    assert t["cube"]["M"] == t["stepRows"] * t["innerChunk"] < 2**31
    # rows per step: 2 * chunkRows * k, k vector chunks, enough for >= 512 rows per IterateAll when
    # the slot and the cube core's rows allow; one row per vector core when the inner heads are sliced
    chunk, cube_max = t["chunkRows"], t["sBase"] + (1 if t["sRem"] else 0)
    if t["innerChunk"] == inner:
        by_slot = SLOT_BYTES // xb // (2 * chunk * inner * d)
        k = max(1, min(-(-512 // (2 * chunk)), by_slot, -(-cube_max // (2 * chunk))))
    else:
        k = 1
    assert t["stepRows"] == 2 * chunk * k
    if outer * inner <= 20000:
        assert len(_heads(t)) == outer * inner
    # as few head groups as the slot allows (no needless shrinking), of equal size but the last
    if t["innerChunk"] == inner:
        heads = t["oBase"] + (1 if t["oRem"] else 0)  # outer heads of the fullest cube core
        most = min(heads, SLOT_BYTES // (t["headStride"] * xb))
        assert -(-heads // t["outerChunk"]) == -(-heads // most)


def test_workspace_bound_at_2_pow_31_elements_and_beyond():
    # 8.3 GiB of workspace before the bound for an x of 2^31 elements; now 16 MiB + 2 MiB per core.
    for outer, s, inner in ((1 << 14, 1 << 10, 1), (1, 1 << 14, 1 << 10), (1 << 15, 1 << 10, 1)):
        t = twin.tiling(outer, s, inner, 128)
        assert outer * s * inner * 128 >= 2**31
        assert t["workspaceBytes"] <= SYS_WS + 20 * (2 << 20)


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
    _cube, vec = _cells(t)
    assert sorted(c for cells in vec.values() for c in cells) == [(0, r, 0) for r in range(1000)]


@pytest.mark.parametrize(
    "x_dtype,table_dtype,dmax",
    [("bfloat16", "bfloat16", 5216), ("float16", "float32", 5216), ("float32", "float32", 3920)],
)
def test_largest_d_is_served_and_one_more_is_refused(x_dtype, table_dtype, dmax):
    t = twin.tiling(1, 16, 1, dmax, x_dtype=x_dtype, table_dtype=table_dtype)
    assert t["chunkRows"] == 1 and t["ubBytes"] <= UB_BUDGET
    with pytest.raises(ValueError, match=f"the largest D served with these dtypes is {dmax}"):
        twin.tiling(1, 16, 1, dmax + 1, x_dtype=x_dtype, table_dtype=table_dtype)


# ---- the vector-only kernel's tiling (op_host/rope_matrix_perm_tiling.cpp) ----------------------


def _perm_work(t):
    """{vector core: (S range, outer range)} as the kernel walks them (inc/rope_matrix_tiling.h)."""
    work = {}
    for v in range(t["blockDim"]):
        sc, og = divmod(v, t["oGroups"])
        s0 = sc * t["sBase"] + min(sc, t["sRem"])
        o0 = og * t["oBase"] + min(og, t["oRem"])
        ns = t["sBase"] + (1 if sc < t["sRem"] else 0)
        no = t["oBase"] + (1 if og < t["oRem"] else 0)
        work[v] = (range(s0, s0 + ns), range(o0, o0 + no))
    return work


@pytest.mark.parametrize("soc,aiv", [("Ascend910B3", 40), ("Ascend910B1", 48)])
@pytest.mark.parametrize("outer", [1, 2, 3, 24, 97])
def test_perm_every_row_exactly_once_any_s(soc, aiv, outer):
    for s in list(range(1, 100)) + [1000, 1521, 28800, 100003]:
        t = twin.perm_tiling(outer, s, 1, 128, soc=soc)
        assert t["aivNum"] == aiv
        assert (t["sCores"], t["oGroups"]) == _split(aiv, s, outer, s)
        assert t["blockDim"] == t["sCores"] * t["oGroups"] <= aiv
        work = _perm_work(t)
        # the S ranges partition [0, S), the outer ranges partition [0, outer), and every core
        # owns one (S range, outer range) pair: each (outer, S) row exactly once
        s_ranges = sorted({(r.start, r.stop) for r, _ in work.values()})
        o_ranges = sorted({(r.start, r.stop) for _, r in work.values()})
        assert [a for a, _ in s_ranges] == [0] + [b for _, b in s_ranges[:-1]] and s_ranges[-1][1] == s
        assert [a for a, _ in o_ranges] == [0] + [b for _, b in o_ranges[:-1]] and o_ranges[-1][1] == outer
        assert all(a < b for a, b in s_ranges + o_ranges), f"S={s}: a core without rows"
        pairs = {(r.start, q.start) for r, q in work.values()}
        assert len(pairs) == len(work) == len(s_ranges) * len(o_ranges)
        sizes = [len(r) for r, _ in work.values()]
        assert max(sizes) - min(sizes) <= 1, s


@pytest.mark.parametrize("d", [16, 44, 64, 80, 96, 128, 130, 1024, 3072])
@pytest.mark.parametrize("x_dtype,table_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "float32"),
                                                 ("float16", "float16"), ("float32", "float32")])
def test_perm_ub_within_budget(d, x_dtype, table_dtype):
    t = twin.perm_tiling(24, 28800, 1, d, x_dtype=x_dtype, table_dtype=table_dtype)
    xb = 4 if x_dtype == "float32" else 2
    tb = 4 if table_dtype == "float32" else xb
    per_row = _twin.perm_ub_bytes_per_element(xb, tb) * t["dPad"]
    assert t["ubBytes"] == per_row * t["chunkRows"] + 32 <= UB_BUDGET
    assert t["chunkRows"] == min((UB_BUDGET - 32) // per_row, -(-28800 // 40), 4095)
    assert (t["dPad"] * xb) % 32 == 0 and (t["dPad"] * 4) % 32 == 0
    assert t["constOffset"] % 32 == 0 and t["constOffset"] >= 112


def test_perm_64bit_offsets():
    # x of 2^33 elements; the last row's offset needs 64 bits, the tiling keeps them.
    outer, s, inner, d = 64, 1 << 20, 1, 128
    t = twin.perm_tiling(outer, s, inner, d)
    assert t["outer"] == outer and t["s"] == s and t["sBase"] * t["sCores"] + t["sRem"] == s
    t = twin.perm_tiling(3, 5, 1 << 22, 128)  # BSND, 2^31 elements in 15 S rows
    assert t["inner"] == 1 << 22 and t["blockDim"] == 5 * 3
    with pytest.raises(ValueError, match="exceeds DataCopyPad's 32-bit stride"):
        twin.perm_tiling(1, 2, 1 << 25, 128)


def _partner(y):
    """partner[j]: the row of y's non-zero in column j, -1 for an all-zero column."""
    return [int(c.nonzero()[0]) if c.any() else -1 for c in y.t()]


GATHER, RUNS, SWAP, WORDS = 0, 1, 2, 3  # PermPartnerPath (inc/rope_matrix_tiling.h)


@pytest.mark.parametrize(
    "mode,sections,x_bytes,expected",
    [
        ("half", [128], 2, RUNS), ("half", [128], 4, RUNS), ("half", [64, 64], 2, RUNS), ("quarter", [128], 2, RUNS),
        ("half", [44, 44, 40], 2, WORDS),  # 22/20-column halves: not 8-column aligned, but in pairs
        ("half", [44, 44, 40], 4, GATHER),  # fp32: no pairs of 2-byte columns
        ("half", [42, 42, 44], 2, GATHER),  # 21-column halves: odd, so pairs straddle the halves
        ("interleave", [128], 2, SWAP), ("interleave", [64, 64], 2, SWAP), ("interleave", [44, 44, 40], 2, SWAP),
        ("interleave", [80], 2, SWAP), ("interleave", [96], 2, SWAP),
        ("interleave", [128], 4, GATHER),  # fp32 pairs are 64-bit words: no half swap
        ("interleave-half", [128], 2, GATHER),
    ],
)
def test_perm_partner_path_per_mode(mode, sections, x_bytes, expected):
    from npu_ops_transformer_ext.reference import mode_matrix

    assert _twin.perm_partner_path(_partner(mode_matrix(mode, sections)), x_bytes) == expected


def test_perm_partner_path_word_gather_needs_whole_pairs():
    # columns (2i, 2i+1) must take (2k, 2k+1), in that order, and no column may be all zero
    pairs = [4, 5, 0, 1, 2, 3, 6, 7]
    assert _twin.perm_partner_path(pairs, 2) == WORDS
    assert _twin.perm_partner_path(pairs, 4) == GATHER  # 4-byte x: a word is one element
    assert _twin.perm_partner_path([5, 4, 0, 1, 2, 3, 6, 7], 2) == GATHER  # a pair taken reversed
    assert _twin.perm_partner_path([3, 4, 0, 1, 2, 5, 6, 7], 2) == GATHER  # an odd partner first
    assert _twin.perm_partner_path([4, 5, -1, -1, 2, 3, 6, 7], 2) == GATHER  # all-zero columns
    assert _twin.perm_partner_path(pairs[:6] + [6], 2) == GATHER  # odd D


def test_perm_partner_path_swap_needs_every_pair():
    pairs = [j ^ 1 for j in range(16)]
    assert _twin.perm_partner_path(pairs, 2) == SWAP
    assert _twin.perm_partner_path(pairs[:15], 2) == GATHER  # odd D: the last column has no pair
    assert _twin.perm_partner_path(pairs[:14] + [-1, 14], 2) == GATHER  # an all-zero column
    assert _twin.perm_partner_path(pairs[:14] + [15, 14], 2) == SWAP
    assert _twin.perm_partner_path([1, 0, 3, 2, 4, 5, 7, 6], 2) == GATHER  # one column its own partner


@pytest.mark.parametrize(
    "x_dtype,expected", [("bfloat16", "DT_BFLOAT16"), ("float16", "DT_FLOAT16"), ("float32", "DT_FLOAT")]
)
def test_matmul_tiled_as_x_dtype(x_dtype, expected):
    # The host passes x's own type to MultiCoreMatmulTiling (fp16 is not tiled as bf16).
    assert twin.tiling(2, 64, 4, 128, x_dtype=x_dtype, table_dtype=x_dtype)["cube"]["aType"] == expected
