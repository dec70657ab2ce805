"""The vector-only (signed permutation) Ascend C kernel on the CPU twin.

Bit-exact against the CPU kernel on the kernel matrix (S x D x dtype pair, layout, B*N, mode and
table form rotating over it), special values bit-compared (NaN, +-Inf, +-0, subnormals, values
near overflow in x, sin and cos), the kernel choice (auto / perm / mix, NPU_OPS_NPU_KERNEL), and
the IEEE behaviour of the MIX kernel's real matmul for comparison.
"""

from __future__ import annotations

import itertools

import npu_ops_transformer_ext  # noqa: F401  (registers the ops)
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference

twin = pytest.importorskip("npu_ops_transformer_ext.twin")

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SPLITS = {"d64": [64], "d128": [128], "d44+44+40": [44, 44, 40], "d80": [80], "d96": [96]}
MODES = ("half", "interleave", "quarter", "interleave-half", "random", "partial", "random-pairs")
S_VALUES = (1, 7, 39, 40, 41, 78, 100, 1000, 1521)
DTYPE_PAIRS = (("bf16", "x"), ("bf16", "fp32"), ("fp16", "x"), ("fp16", "fp32"), ("fp32", "x"))
BN_VALUES = (1, 3, 24)
UB_BUDGET = 196608 - 256 - 8192
SYS_WS = 16 << 20


def _op(x, y, sin, cos):
    return torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos)


def _matrix(mode: str, split: list[int], dtype, g) -> torch.Tensor:
    d = sum(split)
    if mode == "random":  # any signed permutation: the Gather path with arbitrary offsets
        perm = torch.randperm(d, generator=g)
        sign = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)
        y = torch.zeros(d, d)
        y[perm, torch.arange(d)] = sign
        return y.to(dtype)
    if mode == "random-pairs":  # columns move in pairs (2i, 2i+1) <- (2k, 2k+1), random signs: for a
        # 2-byte x the Gather of 32-bit words
        pairs = torch.randperm(d // 2, generator=g)
        perm = torch.stack([2 * pairs, 2 * pairs + 1], 1).reshape(-1)
        sign = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)
        y = torch.zeros(d, d)
        y[perm, torch.arange(d)] = sign
        return y.to(dtype)
    if mode == "partial":  # rotary on the first half of the dims only: all-zero columns after
        h = (d // 2) // 2 * 2
        y = torch.zeros(d, d)
        y[:h, :h] = mode_matrix("half", [h])
        return y.to(dtype)
    return mode_matrix(mode, split, dtype=dtype)


def _cases():
    # Every S x D x dtype pair; layout, B*N, mode and table form rotate over the product.
    for i, (s, split, (dt, tdt)) in enumerate(itertools.product(S_VALUES, SPLITS, DTYPE_PAIRS)):
        layout = ("bnsd", "bsnd")[i % 2]
        bn = BN_VALUES[(i // 2) % 3]
        mode = MODES[i % len(MODES)]
        form = (i // 3) % 2
        yield pytest.param(
            layout, bn, s, split, dt, tdt, mode, form,
            id=f"{layout}-bn{bn}-s{s}-{split}-{dt}-tab_{tdt}-{mode}-form{form}",
        )


def _shape(layout, bn, s, d):
    b, n = {1: (1, 1), 3: (1, 3), 24: (2, 12)}[bn]
    return (b, n, s, d) if layout == "bnsd" else (b, s, n, d)


def _tshape(layout, form, s, d):
    if layout == "bnsd":
        return (s, d) if form == 0 else (1, 1, s, d)
    return (s, 1, d) if form == 0 else (1, s, 1, d)


def _check_perm_report(rep, x):
    t = rep["tiling"]
    assert rep["kernel_kind"] == "perm" and rep["kernel"].startswith("rope_matrix_perm_")
    assert rep["out_write_count_min"] == 1 and rep["out_write_count_max"] == 1
    assert rep["workspace_bytes"] == SYS_WS  # no user workspace
    cores = rep["cores"]
    assert len(cores) == t["blockDim"] == t["sCores"] * t["oGroups"] <= 40
    assert all(c["type"] == "AIV" and c["flags_set"] == 0 for c in cores)
    assert sum(c["rows"] for c in cores) == x.numel() // x.shape[-1]
    xb = x.numel() * x.element_size()
    assert sum(c["gm_read"].get("x", 0) for c in cores) == xb  # x read once
    assert sum(c["gm_write"].get("out", 0) for c in cores) == xb  # out written once
    for c in cores:
        assert c["ub_peak_bytes"] == t["ubBytes"] <= UB_BUDGET
        assert set(c["gm_read"]) <= {"x", "sin", "cos", "tiling"}


@pytest.mark.parametrize("layout,bn,s,split,dt,tdt,mode,form", list(_cases()))
def test_perm_kernel_bit_exact(layout, bn, s, split, dt, tdt, mode, form):
    g = torch.Generator().manual_seed(s * 131 + bn)
    d = sum(SPLITS[split])
    dtype = DT[dt]
    tdtype = dtype if tdt == "x" else torch.float32
    x = torch.randn(_shape(layout, bn, s, d), generator=g).to(dtype)
    y = _matrix(mode, SPLITS[split], dtype, g)
    sin = torch.randn(_tshape(layout, form, s, d), generator=g).to(tdtype)
    cos = torch.randn(_tshape(layout, form, s, d), generator=g).to(tdtype)
    out, rep = twin.run(x, y, sin, cos)  # auto: a signed permutation takes the perm kernel
    assert torch.equal(out, _op(x, y, sin, cos)), "perm kernel differs from the CPU kernel"
    torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
    _check_perm_report(rep, x)
    if mode == "random-pairs":  # 2-byte x: the Gather of 32-bit words (fp32 x: the fp32 Gather)
        assert rep["tiling"]["partnerPath"] == (3 if dtype.itemsize == 2 else 0)


@pytest.mark.parametrize("d", [18, 40, 72, 100])
@pytest.mark.parametrize("dt,tdt", DTYPE_PAIRS[:4])
@pytest.mark.parametrize("layout", ["bnsd", "bsnd"])
def test_perm_kernel_word_gather_with_padded_rows(d, dt, tdt, layout):
    # D not a multiple of 16: the UB row pitch dPad > D, and the padding words of each row gather
    # their row's first word; pairs of columns permuted at random, random signs.
    g = torch.Generator().manual_seed(d)
    dtype = DT[dt]
    tdtype = dtype if tdt == "x" else torch.float32
    for s in (1, 39, 77):
        x = torch.randn(_shape(layout, 3, s, d), generator=g).to(dtype)
        y = _matrix("random-pairs", [d], dtype, g)
        sin = torch.randn(_tshape(layout, 0, s, d), generator=g).to(tdtype)
        cos = torch.randn(_tshape(layout, 0, s, d), generator=g).to(tdtype)
        out, rep = twin.run(x, y, sin, cos)
        assert rep["tiling"]["partnerPath"] == 3 and rep["tiling"]["dPad"] > d
        assert torch.equal(out, _op(x, y, sin, cos)), "perm kernel differs from the CPU kernel"
        torch.testing.assert_close(out, rope_matrix_reference(x, y, sin, cos), rtol=0, atol=0)
        _check_perm_report(rep, x)


def test_perm_kernel_small_s_splits_heads_too():
    # S = 1 (decode): the S rows cannot feed 40 cores, so the outer heads are split as well.
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 16, 1, 128, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [128], dtype=torch.bfloat16)
    sin = torch.randn(1, 128, generator=g).to(torch.bfloat16)
    cos = torch.randn(1, 128, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos)
    assert rep["tiling"]["sCores"] == 1 and rep["tiling"]["oGroups"] == 40
    assert torch.equal(out, _op(x, y, sin, cos))
    _check_perm_report(rep, x)


def test_perm_kernel_seed_shape_traffic():
    # The seed's [1, 24, S, 128] bf16 with [1, 1, S, D] tables, S cut to 2880: x read once, out
    # written once, each table row read once; no workspace, no cube.
    g = torch.Generator().manual_seed(1)
    s, d = 2880, 128
    x = torch.randn(1, 24, s, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(1, 1, s, d, generator=g).to(torch.bfloat16)
    cos = torch.randn(1, 1, s, d, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos)
    assert torch.equal(out, _op(x, y, sin, cos))
    _check_perm_report(rep, x)
    tot = {}
    for c in rep["cores"]:
        for k in ("gm_read", "gm_write"):
            for name, n in c[k].items():
                tot[(k, name)] = tot.get((k, name), 0) + n
    t = rep["tiling"]
    assert tot == {
        ("gm_read", "x"): x.numel() * 2,
        ("gm_write", "out"): x.numel() * 2,
        ("gm_read", "sin"): s * d * 2,
        ("gm_read", "cos"): s * d * 2,
        ("gm_read", "tiling"): 40 * 2 * t["chunkRows"] * t["dPad"] * 4,  # offsets + signs once per core
    }


# ---- special values -------------------------------------------------------------------------


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def _assert_same_bits(a: torch.Tensor, b: torch.Tensor):
    """Same NaN positions; every other element bit-identical (so -0 != +0)."""
    na, nb = torch.isnan(a), torch.isnan(b)
    assert torch.equal(na, nb), f"NaN positions differ: {na.nonzero().tolist()[:8]} vs {nb.nonzero().tolist()[:8]}"
    diff = (_bits(a) != _bits(b)) & ~na
    assert not diff.any(), f"bits differ at {diff.nonzero().tolist()[:8]}: {a[diff][:8]} vs {b[diff][:8]}"


def _specials(dtype) -> list[float]:
    fi = torch.finfo(dtype)
    return [
        float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
        fi.tiny / 4, -fi.tiny / 2, fi.tiny, fi.max, -fi.max * 0.75, fi.max / 2, 1.0, -3.5,
    ]


@pytest.mark.parametrize("dt,tdt", DTYPE_PAIRS)
@pytest.mark.parametrize("mode", ["half", "interleave", "random", "partial", "random-pairs"])
def test_perm_kernel_special_values_bit_compared(dt, tdt, mode):
    g = torch.Generator().manual_seed(11)
    dtype = DT[dt]
    tdtype = dtype if tdt == "x" else torch.float32
    s, d = 41, 64
    vals = torch.tensor(_specials(dtype), dtype=torch.float32)
    pick = lambda n: vals[torch.randint(len(vals), (n,), generator=g)]
    x = torch.randn(2, 3, s, d, generator=g)
    mask = torch.rand(x.shape, generator=g) < 0.15
    x[mask] = pick(int(mask.sum()))
    sin = torch.randn(s, d, generator=g)
    cos = torch.randn(s, d, generator=g)
    for t in (sin, cos):
        m = torch.rand(t.shape, generator=g) < 0.1
        t[m] = pick(int(m.sum()))
    x, sin, cos = x.to(dtype), sin.to(tdtype), cos.to(tdtype)
    y = _matrix(mode, [d], dtype, g)
    out, rep = twin.run(x, y, sin, cos)
    assert rep["kernel_kind"] == "perm"
    if mode == "random-pairs":
        assert rep["tiling"]["partnerPath"] == (3 if dtype.itemsize == 2 else 0)
    _assert_same_bits(out, _op(x, y, sin, cos))


def test_perm_kernel_inf_and_signed_zero_are_exact():
    # The examples of the contract: an Inf reaches only its own and its partner's output, and
    # -0 stays -0, on the perm kernel as on the CPU op.
    y = mode_matrix("half", [16], dtype=torch.bfloat16)
    s = c = torch.full((16,), 0.5)
    x = torch.ones(2, 16, dtype=torch.bfloat16)
    x[0, 3] = float("inf")
    out, _ = twin.run(x, y, s, c, kernel="perm")
    assert torch.isinf(out[0, 3]) and torch.isinf(out[0, 11])
    assert torch.isfinite(out[0, [i for i in range(16) if i not in (3, 11)]]).all()
    _assert_same_bits(out, _op(x, y, s, c))
    z = torch.zeros(2, 16, dtype=torch.bfloat16)
    out, _ = twin.run(z, y, torch.ones(16), -torch.ones(16), kernel="perm")
    assert torch.signbit(out[0, 0]) and out[0, 0] == 0  # -0 + -0 = -0
    _assert_same_bits(out, _op(z, y, torch.ones(16), -torch.ones(16)))


def test_perm_kernel_nan_reaches_only_itself_and_its_partner():
    g = torch.Generator().manual_seed(3)
    y = _matrix("random", [128], torch.bfloat16, g)
    x = torch.randn(1, 2, 5, 128, generator=g).to(torch.bfloat16)
    x[0, 1, 2, 17] = float("nan")
    sin = torch.randn(5, 128, generator=g)
    cos = torch.randn(5, 128, generator=g)
    out, _ = twin.run(x, y, sin, cos)
    partner_of_17 = (y[17] != 0).nonzero().flatten().tolist()  # output columns that read x[17]
    expected = torch.zeros_like(out, dtype=torch.bool)
    expected[0, 1, 2, [17] + partner_of_17] = True
    assert torch.equal(torch.isnan(out), expected)


def test_mix_kernel_special_values_follow_the_matmul():
    # The MIX kernel computes x @ y with a real matmul: Inf * 0 = NaN spreads an Inf of x over
    # its row, and -0 + +0 = +0 loses a negative zero (docs/kernel.md, special values).
    y = mode_matrix("half", [16], dtype=torch.bfloat16)
    s = c = torch.full((16,), 0.5)
    x = torch.ones(2, 16, dtype=torch.bfloat16)
    x[0, 3] = float("inf")
    out, rep = twin.run(x, y, s, c, kernel="mix")
    assert rep["kernel_kind"] == "mix"
    # (x @ y)[j] = sum_k x[k] y[k, j] meets Inf * 0 in every column but 11 (whose y entry in row 3
    # is the one non-zero): NaN everywhere, its own position 3 included; Inf at 11 only.
    assert torch.isinf(out[0, 11]) and int(torch.isnan(out[0]).sum()) == 15
    assert not torch.isnan(out[1]).any()
    z = torch.zeros(2, 16, dtype=torch.bfloat16)
    out, _ = twin.run(z, y, torch.ones(16), -torch.ones(16), kernel="mix")
    assert out[0, 0] == 0 and not torch.signbit(out[0, 0])  # +0 where the CPU op gives -0
    assert torch.signbit(_op(z, y, torch.ones(16), -torch.ones(16))[0, 0])


# ---- kernel choice ----------------------------------------------------------------------------


def _small():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 7, 64, generator=g).to(torch.bfloat16)
    sin = torch.randn(7, 64, generator=g).to(torch.bfloat16)
    cos = torch.randn(7, 64, generator=g).to(torch.bfloat16)
    return x, sin, cos


def test_kernel_choice_auto_perm_mix(monkeypatch):
    monkeypatch.delenv("NPU_OPS_NPU_KERNEL", raising=False)
    x, sin, cos = _small()
    perm = mode_matrix("quarter", [64], dtype=torch.bfloat16)
    dense = (torch.randn(64, 64) / 8).to(torch.bfloat16)
    assert twin.run(x, perm, sin, cos)[1]["kernel_kind"] == "perm"
    assert twin.run(x, dense, sin, cos)[1]["kernel_kind"] == "mix"
    assert twin.run(x, perm, sin, cos, kernel="mix")[1]["kernel_kind"] == "mix"
    with pytest.raises(ValueError, match="needs mat to be a signed \\(partial\\) permutation"):
        twin.run(x, dense, sin, cos, kernel="perm")
    with pytest.raises(ValueError, match="kernel must be 'auto', 'mix' or 'perm'"):
        twin.run(x, perm, sin, cos, kernel="vector")
    # A y with a 2 (not a signed permutation) goes to MIX.
    assert twin.run(x, 2 * perm, sin, cos)[1]["kernel_kind"] == "mix"


def test_kernel_choice_from_environment(monkeypatch):
    x, sin, cos = _small()
    perm = mode_matrix("half", [64], dtype=torch.bfloat16)
    monkeypatch.setenv("NPU_OPS_NPU_KERNEL", "mix")
    assert twin.run(x, perm, sin, cos)[1]["kernel_kind"] == "mix"
    monkeypatch.setenv("NPU_OPS_NPU_KERNEL", "perm")
    assert twin.run(x, perm, sin, cos)[1]["kernel_kind"] == "perm"
    monkeypatch.setenv("NPU_OPS_NPU_KERNEL", "auto")
    assert twin.run(x, perm, sin, cos)[1]["kernel_kind"] == "perm"
    monkeypatch.setenv("NPU_OPS_NPU_KERNEL", "fast")
    with pytest.raises(ValueError, match="NPU_OPS_NPU_KERNEL='fast'.*valid values are auto, mix, perm"):
        twin.run(x, perm, sin, cos)
    # an explicit argument wins over the environment
    assert twin.run(x, perm, sin, cos, kernel="perm")[1]["kernel_kind"] == "perm"


def test_auto_falls_back_to_mix_where_the_perm_tiling_cannot_serve():
    per = twin._twin.perm_ub_bytes_per_element(2, 2)
    dmax = (UB_BUDGET - 32) // per // 16 * 16
    twin.perm_tiling(1, 2, 1, dmax)
    with pytest.raises(ValueError, match="more than the UB budget"):
        twin.perm_tiling(1, 2, 1, dmax + 16)
    d = dmax + 16  # still served by the MIX kernel (D <= 5216 for bf16)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 2, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(2, d, generator=g).to(torch.bfloat16)
    cos = torch.randn(2, d, generator=g).to(torch.bfloat16)
    out, rep = twin.run(x, y, sin, cos)
    assert rep["kernel_kind"] == "mix"
    assert torch.equal(out, _op(x, y, sin, cos))
    with pytest.raises(ValueError, match="use kernel 'auto' or 'mix' for this shape"):
        twin.run(x, y, sin, cos, kernel="perm")
