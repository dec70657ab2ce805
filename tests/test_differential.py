"""Seeded randomized differential test: the CPU op under every kernel family this machine has, the
twin (the NPU kernel, within its limits) and the reference, on random cases.

Each case is drawn from its own fixed seed (``BASE_SEED + index``, so a failure names a case that
reruns alone): rank 2..6, D from 1 to 130, x made as a strided / permuted / offset / expanded view,
tables of every broadcast form (also expanded or strided), x, y, sin and cos dtypes mixed, special
values (NaN, +-Inf, +-0, subnormals, near-overflow) sprinkled in, and the rotate matrix a mode, a
2D/3D composition, a partial or random signed permutation, or a dense matrix.

Where the contract promises bits (a signed permutation, partial ones included) every result is
compared bit for bit with the reference (a NaN in the same place); for a dense y, NaN and Inf must
be where IEEE arithmetic puts them and finite values within a per-dtype tolerance.
"""

from __future__ import annotations

import math

import pytest
import torch
from npu_ops_transformer_ext.matrices import compose_matrix
from npu_ops_transformer_ext.reference import (
    mode_matrix,
    rope_matrix_reference,
    signed_permutation_columns,
)
from special_values import (
    ISAS,
    assert_bit_exact,
    bits,
    cpu_isa,
    special_values,
    twin,
    twin_cube_exact,
)

ops = torch.ops.npu_ops_transformer_ext
BASE_SEED = 20260
N_CASES = 1000
DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-12}
D_CHOICES = (1, 2, 3, 4, 6, 8, 16, 17, 23, 32, 48, 64, 96, 128, 130)


class Case:
    """Draws one case from ``torch.Generator().manual_seed(seed)``; ``desc`` says what was drawn."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)
        self.desc: list[str] = [f"seed={seed}"]
        self.x_dtype = self.pick(DTYPES)
        self.d = self.pick(D_CHOICES)
        self.rank = self.randint(2, 7)
        self.special = self.rand() < 0.4
        self.y, self.kind = self.matrix()
        self.perm = signed_permutation_columns(self.y) is not None
        self.x = self.make_x()
        shared = self.table_shape() if self.rand() < 0.7 else None  # sin and cos of one form
        self.sin = self.make_table("sin", shared or self.table_shape())
        self.cos = self.make_table("cos", shared or self.table_shape())
        self.desc += [
            (
                f"x={self.x_dtype} {list(self.x.shape)} strides={self.x.stride()} "
                f"offset={self.x.storage_offset()}"
            ),
            f"y={self.kind} {self.y.dtype}",
            f"sin={self.sin.dtype} {list(self.sin.shape)} strides={self.sin.stride()}",
            f"cos={self.cos.dtype} {list(self.cos.shape)} strides={self.cos.stride()}",
            f"special={self.special}",
        ]

    # -- drawing helpers
    def rand(self) -> float:
        return float(torch.rand((), generator=self.g))

    def randint(self, lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi, (), generator=self.g))

    def pick(self, seq):
        return seq[self.randint(0, len(seq))]

    def values(self, shape, dtype, frac):
        """randn values in dtype, with special values sprinkled when the case has them (dense y:
        no near-overflow values, since whether a finite sum overflows depends on the order)."""
        t = torch.randn(shape, generator=self.g, dtype=torch.float64)
        if self.special:
            vals = special_values(dtype)
            if not self.perm:
                vals = [v for v in vals if not math.isfinite(v) or abs(v) < 1e4]
            vals = torch.tensor(vals, dtype=torch.float64)
            hit = torch.rand(shape, generator=self.g, dtype=torch.float64) < frac
            t = torch.where(hit, vals[torch.randint(0, len(vals), shape, generator=self.g)], t)
        return t.to(dtype)

    # -- the rotate matrix
    def matrix(self):
        d = self.d
        y_dtype = self.pick((self.x_dtype, torch.float32))
        kinds = ["randperm", "randpartial", "dense", "dense-near-perm"]
        if d % 2 == 0:
            kinds += ["half", "interleave", "interleave-half", "partial"]
        if d % 4 == 0:
            kinds += ["quarter", "compose"]
        kind = self.pick(kinds)
        if kind in ("half", "interleave", "interleave-half", "quarter"):
            y = mode_matrix(kind, [d], dtype=torch.float32)
        elif kind == "compose":
            mode = self.pick(("half", "interleave", "quarter" if d % 8 == 0 else "half"))
            step = 4 if mode == "quarter" else 2
            parts = self.randint(2, 4)
            cuts = sorted({step * self.randint(1, d // step) for _ in range(parts - 1)})
            sections = [b - a for a, b in zip([0] + cuts, cuts + [d]) if b > a]
            kind = f"compose-{mode}{sections}"
            y = compose_matrix(*[mode_matrix(mode, [s], dtype=torch.float32) for s in sections])
        elif kind == "partial":
            r = 2 * self.randint(1, d // 2 + 1)
            rot = mode_matrix(self.pick(("half", "interleave")), [r], dtype=torch.float32)
            zero = torch.zeros(d - r, d - r)
            y = torch.block_diag(rot, zero) if self.rand() < 0.5 else torch.block_diag(zero, rot)
            kind = f"partial{r}"
        elif kind in ("randperm", "randpartial", "dense-near-perm"):
            perm = torch.randperm(d, generator=self.g)
            sign = (torch.randint(0, 2, (d,), generator=self.g) * 2 - 1).float()
            y = torch.zeros(d, d)
            y[perm, torch.arange(d)] = sign
            if kind == "randpartial":
                y[:, torch.rand(d, generator=self.g) < 0.3] = 0
            if kind == "dense-near-perm":
                y[perm[0], 0] = 0.5  # one entry off: not a signed permutation any more
        else:
            y = torch.randn(d, d, generator=self.g) / d**0.5
            y[torch.rand(d, d, generator=self.g) < 0.2] = 0
        if self.rand() < 0.2:
            y = torch.where(y == 0, torch.full_like(y, -0.0), y)  # -0 entries are zeros too
        return y.to(y_dtype), kind

    # -- x as a view with the drawn layout
    def make_x(self):
        r, d = self.rank, self.d
        max_dim = {2: 9, 3: 7, 4: 5, 5: 4, 6: 3}[r]
        shape = [self.randint(1, max_dim + 1) for _ in range(r - 1)] + [d]
        if self.rand() < 0.03:
            shape[self.randint(0, r - 1)] = 0  # empty
        layout = []
        steps = [self.pick((1, 1, 2)) for _ in range(r)]
        offs = [self.pick((0, 0, 1)) for _ in range(r)]
        order = (
            torch.randperm(r, generator=self.g).tolist() if self.rand() < 0.4 else list(range(r))
        )
        big_shape = [o + max(n, 1) * s for n, s, o in zip(shape, steps, offs)]
        base = self.values([big_shape[i] for i in order], self.x_dtype, frac=0.2)
        big = base.permute([order.index(i) for i in range(r)])
        x = big[tuple(slice(o, o + n * s, s) for n, s, o in zip(shape, steps, offs))]
        if self.rand() < 0.15 and r > 2:
            i = self.randint(0, r - 1)
            x = x.narrow(i, 0, min(1, x.shape[i])).expand(shape)  # stride 0 along dim i
            layout.append(f"expanded dim {i}")
        if any(s != 1 for s in steps) or order != list(range(r)) or any(offs):
            layout.append(f"steps={steps} order={order} offsets={offs}")
        self.desc.append("layout: " + (", ".join(layout) or "contiguous"))
        return x

    # -- a table of a drawn broadcast form and layout
    def table_shape(self):
        """A shape that broadcasts to x: rank 1..rank(x); each dim 1 or x's, or (half the time)
        varying along one dim of x only, as RoPE tables do ([S, D], [1, S, 1, D], ...)."""
        xs = list(self.x.shape)
        t_rank = self.randint(1, self.rank + 1)
        lead = xs[self.rank - t_rank : -1]
        if lead and self.rand() < 0.5:
            i = self.randint(0, len(lead))
            return [n if k == i else 1 for k, n in enumerate(lead)] + [self.d]
        return [n if self.rand() < 0.5 else 1 for n in lead] + [self.d]

    def make_table(self, name, tshape):
        t_dtype = self.pick((self.x_dtype, torch.float32))
        t_rank = len(tshape)
        form = self.pick(("contiguous", "contiguous", "expanded", "strided"))
        if form == "expanded":
            # a compact table viewed with stride 0 in its broadcast dims (as a user's .expand)
            compact = self.values([1] * (t_rank - 1) + [self.d], t_dtype, frac=0.3)
            t = compact.expand(tshape)
        elif form == "strided":
            wide = self.values(tshape[:-1] + [2 * self.d + 1], t_dtype, frac=0.3)
            t = wide[..., 1::2]
        else:
            t = self.values(tshape, t_dtype, frac=0.3)
        self.desc.append(f"{name}: {form}")
        return t

    def __str__(self):
        return "; ".join(self.desc)


def _check(out, ref, perm, what):
    if perm:
        assert_bit_exact(out, ref, what)
        return
    assert out.dtype == ref.dtype and out.shape == ref.shape, what
    for name, f in (
        ("NaN", torch.isnan),
        ("+Inf", lambda t: t.isinf() & (t > 0)),
        ("-Inf", lambda t: t.isinf() & (t < 0)),
    ):
        differ = f(out) != f(ref)
        if differ.any():
            i = tuple(differ.nonzero()[0].tolist())
            raise AssertionError(
                f"{what}: {name} in other places ({int(differ.sum())} elements); first at {list(i)}: "
                f"got {out[i].item()!r}, want {ref[i].item()!r}"
            )
    fin = torch.isfinite(ref)
    tol = TOL[ref.dtype]
    torch.testing.assert_close(out[fin], ref[fin], rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def _bits_equal(a, b):
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


@pytest.mark.parametrize("index", range(N_CASES))
def test_differential(index):
    c = Case(BASE_SEED + index)
    x, y, sin, cos = c.x, c.y, c.sin, c.cos
    before = [t.clone() for t in (x, y, sin, cos)]
    ref = rope_matrix_reference(x, y, sin, cos)
    assert ref.dtype == x.dtype and ref.shape == x.shape
    known = []  # failures of known, reasoned cases outside this test's files (xfail at the end)
    for cap, isa in ISAS:
        with cpu_isa(cap):
            out = ops.rope_matrix(x, y, sin, cos)
            assert out.is_contiguous(), f"cpu[{isa}]: output not contiguous; {c}"
            _check(out, ref, c.perm, f"cpu[{isa}] rope_matrix; {c}")
            if index % 3 == 0:
                k = x.flip(0)  # a second tensor the tables broadcast to
                qo, ko = ops.rope_matrix_qk(x, k, y, sin, cos)
                _check(qo, ref, c.perm, f"cpu[{isa}] rope_matrix_qk q; {c}")
                _check(
                    ko,
                    rope_matrix_reference(k, y, sin, cos),
                    c.perm,
                    f"cpu[{isa}] rope_matrix_qk k; {c}",
                )
            if index % 3 == 1:
                xi = x.clone()  # in place on a copy that owns its memory
                ops.rope_matrix_(xi, y, sin, cos)
                _check(xi, ref, c.perm, f"cpu[{isa}] rope_matrix_; {c}")
    for t, b in zip((x, y, sin, cos), before):
        assert _bits_equal(t, b), f"an input was modified; {c}"
    _compare_twin(c, ref, known)
    if known:  # every other check of the case has passed
        pytest.xfail(known[0])


def _compare_twin(c, ref, known):
    """The twin within the NPU kernel's limits (x bf16/fp16/fp32, D >= 16, table forms it takes; a
    ValueError/TypeError from its launcher means outside them). Its cube-matmul kernel is exact for
    a signed permutation only when x is finite and non-zero (Inf * 0 = NaN, -0 + +0 = +0): a
    difference there is recorded as known (the case ends as an expected failure naming it); with
    an exact (perm) kernel, or x the cube handles exactly, every difference fails."""
    x, y, sin, cos = c.x, c.y, c.sin, c.cos
    if twin is None or x.dtype == torch.float64 or c.d < 16 or x.numel() == 0:
        return
    try:
        out, report = twin.run(x, y, sin, cos)
    except (ValueError, TypeError):
        return  # outside the NPU kernel's limits
    kernel = str(report.get("kernel", ""))
    try:
        _check(out, ref, c.perm, f"twin[{kernel}]; {c}")
    except AssertionError as e:
        if not (c.perm and "perm" not in kernel and not twin_cube_exact(x)):
            raise
        known.append(
            f"the twin served a signed permutation with the cube-matmul kernel {kernel!r}, which "
            f"computes Inf*0 = NaN and -0 + +0 = +0 (no exact vector kernel in this build): {e}"
        )


def test_twin_compared_often_enough():
    """Keeps the twin half of the differential honest: enough of the cases reach it."""
    if twin is None:
        pytest.skip("the twin extension is not built")
    n = 0
    for index in range(N_CASES):
        c = Case(BASE_SEED + index)
        if c.x.dtype != torch.float64 and c.d >= 16 and c.x.numel() and not c.special:
            try:
                twin.run(c.x, c.y, c.sin, c.cos)
                n += 1
            except (ValueError, TypeError):
                pass
    assert n >= 20, f"only {n} of {N_CASES} cases are within the twin's limits"
