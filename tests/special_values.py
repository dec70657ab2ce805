"""Shared by test_special_values.py and test_differential.py: special values per dtype, the CPU
kernel families this machine has, bit comparison, and the twin comparison."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
from npu_ops_transformer_ext.matrices import get_half_matrix

ops = torch.ops.npu_ops_transformer_ext


def special_values(dtype: torch.dtype) -> list[float]:
    """NaN, +-Inf, +-0, subnormals, the smallest normal, near-overflow values and a few ordinary ones,
    each exactly representable in ``dtype``."""
    fi = torch.finfo(dtype)
    vals = [
        float("nan"),
        float("inf"),
        -float("inf"),
        0.0,
        -0.0,
        fi.smallest_normal,
        -fi.smallest_normal,
        fi.smallest_normal / 4,  # a subnormal
        fi.tiny * fi.eps,
        -(fi.tiny * fi.eps),  # the smallest subnormals
        fi.max,
        -fi.max,
        fi.max / 2 * 1.5,  # near overflow: x*cos or the sum can overflow
        1.0,
        -1.5,
        0.5,
    ]
    # round through dtype so that every value is exactly representable
    return torch.tensor(vals, dtype=torch.float64).to(dtype).double().tolist()


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bit_exact(out: torch.Tensor, ref: torch.Tensor, what: str = "") -> None:
    """Equal bits; a NaN must be a NaN in the same place, its sign and payload are not compared
    (torch's own conversions and the vector units disagree on them, the contract does not fix them)."""
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    nan = torch.isnan(ref)
    wrong_nan = torch.isnan(out) != nan
    differ = ((bits(out) != bits(ref)) & ~nan) | wrong_nan
    if differ.any():
        i = differ.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(differ.sum())} of {differ.numel()} elements differ; first at {i}: "
            f"got {out[tuple(i)].item()!r}, want {ref[tuple(i)].item()!r}"
        )


def _isa_of(cap: str | None) -> str:
    with cpu_isa(cap):
        x = torch.zeros(1, 32, dtype=torch.bfloat16)
        return ops._cpu_kernel_choice(
            x, get_half_matrix(32), torch.zeros(32), torch.zeros(32)
        ).split("/")[0]


@contextlib.contextmanager
def cpu_isa(cap: str | None):
    """Caps the CPU kernel family (NPU_OPS_CPU_ISA), None = the best this CPU has."""
    old = os.environ.get("NPU_OPS_CPU_ISA")
    if cap is None:
        os.environ.pop("NPU_OPS_CPU_ISA", None)
    else:
        os.environ["NPU_OPS_CPU_ISA"] = cap
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("NPU_OPS_CPU_ISA", None)
        else:
            os.environ["NPU_OPS_CPU_ISA"] = old


def available_isas() -> list[tuple[str | None, str]]:
    """(NPU_OPS_CPU_ISA cap, kernel family it selects) for every distinct family on this machine."""
    seen, out = set(), []
    for cap in ("generic", "avx2", "avx512", None):
        isa = _isa_of(cap)
        if isa not in seen:
            seen.add(isa)
            out.append((cap, isa))
    return out


ISAS = available_isas()


def cpu_results(fn):
    """``[(isa, fn())]`` with fn run once under each CPU kernel family this machine has."""
    res = []
    for cap, isa in ISAS:
        with cpu_isa(cap):
            res.append((isa, fn()))
    return res


try:
    from npu_ops_transformer_ext import twin
except ImportError:  # the twin extension is optional
    twin = None


def twin_supports(x, y, sin, cos) -> bool:
    """Within the twin's (the NPU kernel's) limits: x bf16/fp16/fp32, D >= 16, rank 2..4 in the
    BNSD/BSND/[S, D] forms, tables that vary along one dim of x (checked by the twin itself)."""
    return (
        twin is not None
        and x.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and x.shape[-1] >= 16
        and 2 <= x.dim() <= 4
        and x.numel() > 0
    )


def twin_cube_exact(x) -> bool:
    """Whether the cube-matmul kernel computes ``x @ y`` exactly for a signed permutation: every
    element of x finite and non-zero (then the sum is one value plus zeros; tables may hold any
    value, they only meet the vector unit)."""
    return bool((torch.isfinite(x) & (x != 0)).all())


def compare_twin(x, y, sin, cos, ref, what=""):
    """Bit-compare the twin with ``ref`` for a signed permutation. The cube-matmul kernel cannot
    keep the contract for non-finite values and -0 (``Inf * 0 = NaN``, ``-0 + +0 = +0``); when the
    twin took that kernel and differs on an x with such values, the case is an expected failure
    whose reason names it. Where it is exact (``twin_cube_exact``), and for a twin build that serves
    signed permutations with an exact kernel, the comparison is strict."""
    out, report = twin.run(x, y, sin, cos)
    kernel = str(report.get("kernel", ""))
    try:
        assert_bit_exact(out, ref, f"{what} twin[{kernel}]")
    except AssertionError as e:
        if "perm" not in kernel and not twin_cube_exact(x):
            pytest.xfail(
                f"the twin served a signed permutation with the cube-matmul kernel {kernel!r}, "
                f"which computes Inf*0 = NaN and -0 + +0 = +0 (no exact vector kernel in this "
                f"build): {e}"
            )
        raise
