"""The twin's predicted NPU times, next to the seed's measured 910B figures.

    python -m npu_ops_transformer_ext.bench --npu-model                  # the seed shape, every mode
    python -m npu_ops_transformer_ext.bench --npu-model --shape 1,24,4096,128 --modes half-1d,dense

Runs the Ascend C kernels on the CPU twin (``twin.run(..., timeline=True)``) for every mode and
kernel (the vector-only ``perm`` kernel for the signed permutations where its tiling serves the
shape, else ``-``; the ``MIX`` kernel for all),
and prints the timing model's prediction (docs/kernel.md, "Timing model") beside the seed's three
measured rows at ``[1, 24, 28800, 128]`` bf16 on a 910B: eager small ops, CANN's fused
``npu_rotary_mul`` and the original RoPE-Matrix operator. At the seed shape it also prints the
calibration: the twin's test-only copy of the original's schedule against its measured 0.8 ms, and
the perm kernel at half 1D against ``npu_rotary_mul``'s 0.35 ms. A prediction, not a measurement:
the model's limits are in docs/kernel.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .precision import sections_for
from .reference import mode_matrix

__all__ = ["CALIBRATION", "D_MAX", "D_MIN", "MODES", "SEED_MEASURED_MS", "SEED_SHAPE", "calibration", "perm_problem",
           "predict", "run"]

SEED_SHAPE = (1, 24, 28800, 128)
#: seed 002, bf16 [1, 24, 28800, 128] on a 910B: (eager small ops, npu_rotary_mul, original RoPE-Matrix)
#: in ms; npu_rotary_mul's 2D/3D half figures include its slice + concat.
SEED_MEASURED_MS = {
    "half-1d": (2.1, 0.35, 0.8),
    "half-2d": (2.5, 1.1, 0.8),
    "half-3d": (2.9, 5.0, 0.8),
    "interleave-1d": (2.3, 1.0, 0.8),
    "interleave-2d": (2.6, 1.0, 0.8),
    "interleave-3d": (2.8, 1.0, 0.8),
}
#: mode name -> (rotation mode, number of sections); None: a dense random y (MIX only)
MODES = {
    "half-1d": ("half", 1), "half-2d": ("half", 2), "half-3d": ("half", 3),
    "interleave-1d": ("interleave", 1), "interleave-2d": ("interleave", 2), "interleave-3d": ("interleave", 3),
    "dense": (None, 1),
}
#: the head dims D the NPU kernels serve (the MIX kernel's tiling; the perm kernel's stops lower, e.g.
#: at 4688 for bf16): D_MIN <= D <= D_MAX[x's dtype], tables of x's dtype (README, "Limits")
D_MIN = 16
D_MAX = {"bfloat16": 5216, "float16": 5216, "float32": 3920}
#: (name, what the model runs, measured ms): the two calibration anchors of docs/kernel.md
CALIBRATION = (
    ("original schedule (MIX, cube then vector, full workspace)", "original", 0.8),
    ("vector-only kernel, half 1D, vs npu_rotary_mul", "perm", 0.35),
)


def _inputs(shape: Sequence[int], dtype: torch.dtype, mode: str):
    b, n, s, d = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, n, s, d, generator=g).to(dtype)
    sin = torch.randn(1, 1, s, d, generator=g).to(dtype)
    cos = torch.randn(1, 1, s, d, generator=g).to(dtype)
    rot, parts = MODES[mode]
    if rot is None:
        y = (torch.randn(d, d, generator=g) / d**0.5).to(dtype)
    else:
        y = mode_matrix(rot, sections_for(f"{parts}d", d), dtype=dtype)
    return x, y, sin, cos


def predict(
    shape: Sequence[int],
    mode: str,
    kernel: str,
    *,
    dtype: torch.dtype = torch.bfloat16,
    soc: str = "Ascend910B3",
    trace: str | None = None,
    timing_params: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The twin's timeline (``report["timeline"]`` of :func:`twin.run`) for a BNSD x of ``shape``,
    ``mode`` (a key of :data:`MODES`) and ``kernel``: ``"perm"``, ``"mix"`` or ``"original"`` (the
    test-only copy of the original operator's schedule, bf16 only)."""
    from . import twin

    x, y, sin, cos = _inputs(shape, dtype, mode)
    if kernel == "original":
        _, report = twin._run(x, y, sin, cos, soc=soc, variant="test_only_original_schedule", timeline=True,
                              trace=trace, timing_params=timing_params)
    else:
        _, report = twin.run(x, y, sin, cos, soc=soc, kernel=kernel, timeline=True, trace=trace,
                             timing_params=timing_params)
    return report["timeline"]


def _ms(v: float) -> str:
    """A predicted time in ms with 4 significant digits (a small shape's microseconds keep theirs),
    whole ms from 1000."""
    return f"{v:.0f}" if v >= 1000 else f"{v:#.4g}"


def calibration(soc: str = "Ascend910B3", timing_params: dict[str, float] | None = None,
                predicted_ms: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """The model against the seed's two anchors at the seed shape: rows of name, predicted and
    measured ms and the relative error. ``predicted_ms``: kernel -> the prediction in ms already
    made for it at the seed shape, half 1D, bf16 (with the same ``soc`` and ``timing_params``),
    used instead of running it again."""
    rows = []
    for name, kernel, measured in CALIBRATION:
        pred = (predicted_ms or {}).get(kernel)
        if pred is None:
            pred = predict(SEED_SHAPE, "half-1d", kernel, soc=soc, timing_params=timing_params)["predicted_us"] / 1000
        rows.append({"name": name, "predicted_ms": pred, "measured_ms": measured, "error": pred / measured - 1})
    return rows


def perm_problem(shape: Sequence[int], dtype: torch.dtype = torch.bfloat16, soc: str = "Ascend910B3") -> str | None:
    """Why the vector-only (perm) kernel's tiling cannot serve a BNSD x of ``shape`` and ``dtype``
    with ``[1, 1, S, D]`` tables of x's dtype (e.g. D above its UB limit, below the MIX kernel's),
    or None when it can."""
    from . import twin

    b, n, s, d = shape
    name = str(dtype).replace("torch.", "")
    try:
        twin.perm_tiling(b * n, s, 1, d, x_dtype=name, table_dtype=name, soc=soc)
    except ValueError as e:
        return str(e)
    return None


def run(shape: Sequence[int], modes: Sequence[str], dtype: torch.dtype = torch.bfloat16, soc: str = "Ascend910B3",
        timing_params: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Prints the predictions for every mode in ``modes`` and kernel (with the seed's figures and,
    at the seed shape in bf16, the calibration) and returns one row per (mode, kernel)."""
    rows = []
    no_perm = perm_problem(shape, dtype, soc)  # the perm kernel's tiling refuses the shape: MIX only
    for mode in modes:
        for kernel in ("perm", "mix"):
            if kernel == "perm" and (MODES[mode][0] is None or no_perm):
                continue
            t = predict(shape, mode, kernel, dtype=dtype, soc=soc, timing_params=timing_params)
            rows.append({"mode": mode, "kernel": kernel, "predicted_ms": t["predicted_us"] / 1000,
                         "hbm_mb": (t["bytes"]["hbm_read"] + t["bytes"]["hbm_write"]) / 1e6,
                         "l2_mb": (t["bytes"]["l2_read"] + t["bytes"]["l2_write"]) / 1e6})
    seed = tuple(shape) == SEED_SHAPE and dtype == torch.bfloat16
    print(f"twin timing model, x {list(shape)} {str(dtype).replace('torch.', '')} BNSD, tables [1,1,S,D], {soc} "
          "(predicted, not measured; docs/kernel.md 'Timing model')")
    head = f"{'mode':<15}{'perm ms':>9}{'MIX ms':>9}"
    if seed:
        head += f"  | seed 910B measured: {'small ops':>9}{'npu_rotary_mul':>15}{'original':>9}"
    print(head)
    for mode in modes:
        got = {r["kernel"]: r["predicted_ms"] for r in rows if r["mode"] == mode}
        line = f"{mode:<15}{_ms(got.get('perm', float('nan'))):>9}{_ms(got['mix']):>9}"
        if seed and mode in SEED_MEASURED_MS:
            small, fused, original = SEED_MEASURED_MS[mode]
            line += f"  | {'':>20}{small:>9.2f}{fused:>15.2f}{original:>9.2f}"  # under the header's columns
        print(line.replace("nan", "  -"))
    if no_perm and any(MODES[m][0] is not None for m in modes):
        print(f"perm -: the vector-only kernel does not serve this shape ({no_perm}); the launcher runs MIX")
    if seed:
        print("calibration (seed shape, bf16):")
        half_1d = {r["kernel"]: r["predicted_ms"] for r in rows if r["mode"] == "half-1d"}
        for c in calibration(soc, timing_params, half_1d):
            print(f"  {c['name']:<58} predicted {c['predicted_ms']:.3f} ms, measured {c['measured_ms']:.2f} ms, "
                  f"error {c['error']:+.1%}")
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Command line: ``python -m npu_ops_transformer_ext.bench --npu-model --help``."""
    import argparse

    from . import _cli

    ap = argparse.ArgumentParser(prog="python -m npu_ops_transformer_ext.bench --npu-model", description=__doc__,
                                 formatter_class=_cli.HelpFormatter, allow_abbrev=False)  # whole names only
    ap.add_argument("--shape", default=",".join(map(str, SEED_SHAPE)), help="B,N,S,D of the BNSD x")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                    help="dtype of x, the tables and the matrix")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list, each one of: {', '.join(MODES)}")
    ap.add_argument("--soc", default="Ascend910B3", help="SoC whose core counts the tiling uses")
    a = ap.parse_args(argv)
    shape = _cli.parse_shape(ap, a.shape)
    modes = _cli.parse_modes(ap, a.modes, MODES)
    if not modes:
        ap.error(f"--modes: give at least one of {', '.join(MODES)}")
    from . import twin

    if a.soc not in twin.SOCS:
        ap.error(f"--soc {a.soc!r} is not a SoC the twin knows; choose from {', '.join(twin.SOCS)}")
    b, n, s, d = shape
    d_max = D_MAX[a.dtype]
    if not D_MIN <= d <= d_max:
        limits = ", ".join(f"{k} {v}" for k, v in D_MAX.items())
        ap.error(f"--shape {a.shape}: the NPU kernels serve {D_MIN} <= D <= {d_max} for --dtype {a.dtype} "
                 f"(the largest D: {limits}), got D = {d}")
    if d % 2:
        for m in modes:
            if MODES[m][0] is not None:
                ap.error(f"--modes {m} needs an even D (its rotation turns pairs of elements), got D = {d} "
                         f"from --shape {a.shape}; at this D choose from dense")
    try:  # anything else the MIX kernel's tiling refuses for this shape, before the twin runs
        twin.tiling(b * n, s, 1, d, x_dtype=a.dtype, table_dtype=a.dtype, soc=a.soc)
    except ValueError as e:
        ap.error(f"--shape {a.shape} (--dtype {a.dtype}, --soc {a.soc}): {e}")
    return run(shape, modes, getattr(torch, a.dtype), a.soc)


if __name__ == "__main__":
    main()
