"""Precision check of rope_matrix, following the original operator's ``test_rope.py`` protocol.

    python -m npu_ops_transformer_ext.precision            # [1, 24, 28800, 128] bf16, 1D/2D/3D x half/interleave
    python -m npu_ops_transformer_ext.precision --small    # a CPU-CI sized run
    python -m npu_ops_transformer_ext.precision --shape 1,40,32760,128 --dims 3d --modes interleave --table-dtype fp32

For every case (RoPE dims 1D ``[D]``, 2D ``[D/2, D/2]``, 3D ``[44, 44, 40]`` (scaled for other D) x
mode half/interleave) it runs the script's versions on the same BNSD x and tables:

  v1  small ops: split, rotate_half / rotate_every_two, concat; in x's dtype, as the script did
  v2  one rotate matrix per axis: ``x_i*cos_i + (x_i @ R_i)*sin_i``; in x's dtype
  v3  one composed matrix, float32 math (the script's ``high_precision`` v3)
  v4  the vendor fused op ``torch_npu.npu_rotary_mul`` (only when torch_npu and an NPU are present)
  v5  this package's ``rope_matrix``
  ref the contract without the matrix: each axis rotated by rearranging its elements, fp32 math,
      one rounding (checks the matrix that v3 and v5 are given)

and compares each with the float32 contract ``reference.rope_matrix_reference`` (fp32 math, one
rounding to x's dtype). It prints the script's metric ``min(abs_err, rel_err).max()`` with
``abs_err = |a - b|`` and ``rel_err = abs_err / (max(|a|, |b|) + 1e-8)``, the count of elements
with a non-zero error (a NaN or an infinity where the golden has another value is an infinite
error), and the largest absolute error. The exit status is 1 when v5 exceeds ``--threshold``
(default: one ulp of x's dtype, ``torch.finfo(dtype).eps``) or ref differs from the golden in any
case, and 2 when an option is refused before any case runs (e.g. a head dim D that a --dims split
does not fit: 1d needs an even D >= 2, 2d >= 4, 3d >= 6; --device npu without an NPU; a
--threshold that is not a finite number >= 0; a --seed outside 0 .. 2**32 - 1).

Two weaknesses of the original script are fixed: sin and cos are distinct tables (real RoPE angles
at random positions, not one random tensor passed twice), and the comparison is signed (the
script compared ``|a|`` with ``|b|``, which hides sign errors).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence

import torch

from . import _cli, reference
from .matrices import get_half_matrix, get_interleave_matrix
from .tables import rope_nd

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
__all__ = ["DEFAULT_SHAPE", "SMALL_SHAPE", "main", "run_case", "sections_for", "seed_metric"]

DIMS = ("1d", "2d", "3d")
ROT_MODES = ("half", "interleave")
DEFAULT_SHAPE = (1, 24, 28800, 128)
SMALL_SHAPE = (1, 3, 97, 128)
#: The smallest head dim D of each --dims, which also needs D even: below it a part of
#: ``sections_for`` is 0 (2D [0, 2] at D = 2, 3D [2, 2, 0] at D = 4); an odd D leaves an odd part.
MIN_DIM = {"1d": 2, "2d": 4, "3d": 6}


def sections_for(dims: str, d: int) -> list[int]:
    """RoPE axis split of head dim d: 1D ``[d]``, 2D ``[d/2, d/2]``, 3D the seed's ``44+44+40``
    for d = 128 (in general ``[e, e, d - 2e]`` with ``e = 2 * round(d * 11 / 64)``). For an even d
    every part is even, as a half or interleave rotation needs: when d/2 is odd, 2D is
    ``[d/2 - 1, d/2 + 1]``; every part is positive from ``MIN_DIM[dims]`` on (2D at d = 2 is
    ``[0, 2]``, 3D at d = 4 ``[2, 2, 0]``)."""
    if dims == "1d":
        return [d]
    if dims == "2d":
        h = d // 4 * 2
        return [h, d - h]
    if dims == "3d":
        e = 2 * round(d * 11 / 64)
        return [e, e, d - 2 * e]
    raise ValueError(f"dims must be 1d, 2d or 3d, got {dims!r}")


def seed_metric(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int, float]:
    """``(min(abs_err, rel_err).max(), count of non-zero errors, max abs_err)``, signed comparison.

    Elements that are equal (also the same infinity, or NaN in both) have no error; a NaN or an
    infinity against anything else is an infinite error, so that it is counted and fails every
    threshold (``|inf - inf|`` and ``inf / inf`` would otherwise be NaN, which compares false)."""
    a, b = a.double(), b.double()
    same = (a == b) | (a.isnan() & b.isnan())
    abs_err = torch.where(same, 0.0, (a - b).abs()).nan_to_num(nan=math.inf, posinf=math.inf)
    rel_err = abs_err / (torch.maximum(a.abs(), b.abs()).nan_to_num(nan=math.inf, posinf=math.inf) + 1e-8)
    rel_err = torch.where(a.isfinite() & b.isfinite(), rel_err, abs_err)
    m = torch.minimum(abs_err, rel_err)
    return float(m.max()), int((m > 0).sum()), float(abs_err.max())


def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except Exception:  # noqa: BLE001  (torch_npu may fail to import in many ways: no NPU then)
        return False
    return hasattr(torch, "npu") and torch.npu.is_available()


def _v4(x, sin, cos, mode, sections):
    import torch_npu

    sin4, cos4 = sin[None, None], cos[None, None]
    if mode == "interleave" or len(sections) == 1:
        return torch_npu.npu_rotary_mul(x, cos4, sin4, rotary_mode=mode)
    parts = []
    for xp, sp, cp in zip(
        x.split(sections, -1), sin4.split(sections, -1), cos4.split(sections, -1)
    ):
        parts.append(
            torch_npu.npu_rotary_mul(
                xp.contiguous(), cp.contiguous(), sp.contiguous(), rotary_mode=mode
            )
        )
    return torch.cat(parts, dim=-1)


def _v5(x, mat, sin, cos):
    return torch.ops.npu_ops_transformer_ext.rope_matrix(x, mat, sin, cos)


def run_case(
    x: torch.Tensor,
    dims: str,
    mode: str,
    table_dtype: torch.dtype,
    gen_seed: int,
    device: str,
    with_v4: bool,
) -> dict[str, tuple[float, int, float]]:
    """Results ``{version: (metric, nonzero, max_abs)}`` for one (dims, mode) case: ``x`` BNSD,
    ``dims`` 1d/2d/3d, ``mode`` half/interleave, tables of ``table_dtype`` at random positions
    drawn with seed ``gen_seed``; v4 only when ``with_v4``."""
    _b, _n, s, d = x.shape
    sections = sections_for(dims, d)
    g = torch.Generator().manual_seed(gen_seed)
    pos = torch.randint(0, 1024, (s, len(sections)), generator=g)
    t = rope_nd(pos, sections, mode=mode, dtype=table_dtype, device=device)
    sin, cos = t.sin, t.cos
    mat = t.mat.to(x.dtype)
    build = get_half_matrix if mode == "half" else get_interleave_matrix
    mats = [build(k, dtype=x.dtype, device=device) for k in sections]
    golden = reference.rope_matrix_reference(x, mat, sin, cos)
    outs = {
        # The contract again without ``mat``: each axis rotated by rearranging its elements, fp32
        # math, one rounding. It must equal the golden exactly, else ``mat`` is not the rotation
        # the mode and sections describe (and v5, given the same ``mat``, would still match).
        "ref": reference.rope_v1(x, sin, cos, mode, sections, compute_dtype=torch.float32),
        "v1": reference.rope_v1(x, sin, cos, mode, sections, compute_dtype=None),
        "v2": reference.rope_v2(x, sin, cos, mats, compute_dtype=None),
        "v3": reference.rope_v3(x, sin, cos, mat, compute_dtype=torch.float32),
    }
    if with_v4:
        outs["v4"] = _v4(x, sin, cos, mode, sections)
    outs["v5"] = _v5(x, mat, sin, cos)
    return {k: seed_metric(v, golden) for k, v in outs.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m npu_ops_transformer_ext.precision --help``. Returns the exit
    status: 0 when v5 is within the threshold and ref equals the golden in every case, else 1 (an
    invalid option exits with 2 through ``argparse``'s ``error``)."""
    p = argparse.ArgumentParser(
        prog="python -m npu_ops_transformer_ext.precision",
        allow_abbrev=False,  # options by their whole names only (as bench, whose hand-offs need it)
        description=__doc__,
        formatter_class=_cli.HelpFormatter,
    )
    p.add_argument(
        "--shape", default=None,
        help=f"B,N,S,D of the BNSD x (default: {','.join(map(str, DEFAULT_SHAPE))}, or "
        f"{','.join(map(str, SMALL_SHAPE))} with --small)",
    )
    p.add_argument(
        "--small", action="store_true", help=f"use {','.join(map(str, SMALL_SHAPE))} (CPU CI)"
    )
    p.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES), help="dtype of x")
    p.add_argument(
        "--table-dtype",
        default="same",
        choices=["same", "fp32"],
        help="sin/cos dtype (same: x's)",
    )
    p.add_argument("--dims", default=",".join(DIMS), help=f"comma list, each one of: {', '.join(DIMS)}")
    p.add_argument(
        "--modes", default=",".join(ROT_MODES), help=f"comma list, each one of: {', '.join(ROT_MODES)}"
    )
    p.add_argument(
        "--device", default="auto",
        help="auto (npu when torch_npu finds one, else cpu), cpu, npu or npu:N (npu needs torch_npu "
        "and an NPU)",
    )
    p.add_argument(
        "--threshold", type=float, default=None,
        help="max v5 metric, a finite number >= 0 (default: eps of --dtype: bf16 0.0078125, fp16 "
        "0.000977, fp32 1.19e-07)",
    )
    p.add_argument("--seed", type=int, default=0,
                   help=f"seed of x and of the table positions, from 0 to 2**32 - 1 = {2**32 - 1}")
    _cli.add_progress_option(p)
    a = p.parse_args(argv)
    dims_list = list(dict.fromkeys(d for d in a.dims.split(",") if d))  # each once, in order
    modes_list = list(dict.fromkeys(m for m in a.modes.split(",") if m))
    for d in dims_list:
        if d not in DIMS:
            p.error(f"unknown --dims entry {d!r}; choose from {', '.join(DIMS)}")
    for m in modes_list:
        if m not in ROT_MODES:
            p.error(f"unknown --modes entry {m!r}; choose from {', '.join(ROT_MODES)}")
    if not dims_list or not modes_list:
        p.error(f"--dims and --modes need at least one entry each ({', '.join(DIMS)}; {', '.join(ROT_MODES)})")
    if a.threshold is not None and not (math.isfinite(a.threshold) and a.threshold >= 0):
        p.error(f"--threshold must be a finite number >= 0, got {a.threshold}")
    if not 0 <= a.seed < 2**32:  # the cases' table seeds are seed * 100 + 10 * dims + mode, within torch's 64 bits
        p.error(f"--seed must be an integer from 0 to 2**32 - 1 = {2**32 - 1}, got {a.seed}")
    if not re.fullmatch(r"auto|cpu|npu(:\d+)?", a.device):
        p.error(f"--device must be auto, cpu, npu or npu:N, got {a.device!r}")

    import npu_ops_transformer_ext  # noqa: F401  (registers the op)

    if a.shape and a.small:
        p.error(f"--small (the shape {','.join(map(str, SMALL_SHAPE))}) and --shape {a.shape} exclude each other; "
                "give one")
    if a.shape:
        try:
            shape = tuple(int(v) for v in a.shape.split(","))
        except ValueError:
            shape = ()
        if len(shape) != 4 or min(shape) < 1:
            p.error(f"--shape must be four positive integers B,N,S,D, got {a.shape!r}")
    else:
        shape = SMALL_SHAPE if a.small else DEFAULT_SHAPE
    problem = _cli.memory_problem(f"--shape {','.join(map(str, shape))}", 2 * math.prod(shape) * 4,
                                  "x in float32 and its output")
    if problem:
        p.error(problem)
    d = shape[3]
    for dims in dims_list:
        parts = sections_for(dims, d)
        if d % 2 or d < MIN_DIM[dims] or min(parts) < 2 or any(v % 2 for v in parts):
            p.error(
                f"--dims {dims} needs an even D >= {MIN_DIM[dims]}, got D = {d} from --shape "
                f"{','.join(map(str, shape))} (split {parts}); "
                + "valid D: " + ", ".join(f"{k} even >= {v}" for k, v in MIN_DIM.items())
            )
    dtype = _DTYPES[a.dtype]
    table_dtype = dtype if a.table_dtype == "same" else torch.float32
    npu = _npu_available()
    if a.device.startswith("npu") and not npu:
        p.error(f"--device {a.device}: no NPU here (torch_npu is not installed or finds none); use "
                "--device cpu or auto")
    device = ("npu" if npu else "cpu") if a.device == "auto" else a.device
    with_v4 = npu and device.startswith("npu")
    threshold = torch.finfo(dtype).eps if a.threshold is None else a.threshold

    torch.manual_seed(a.seed)
    x = torch.randn(shape, dtype=torch.float32).to(dtype).to(device)
    print(
        f"rope_matrix precision: x {list(shape)} {a.dtype} BNSD, tables {str(table_dtype).split('.')[-1]}, "
        f"device {device}, golden = fp32 contract rounded once, threshold(v5) = {threshold:g}; "
        f"npu_ops_transformer_ext {_cli.package_version()} (git {_cli.git_revision()})"
    )
    print(f"{'case':<16}{'ver':<5}{'min(abs,rel).max':>18}{'nonzero':>12}{'max |a-b|':>14}")
    failed = []
    bar = _cli.progress(len(dims_list) * len(modes_list), "precision", a.progress, unit="case")
    for dims in dims_list:
        for mode in modes_list:
            bar.set_postfix_str(f"{dims}-{mode}")
            # The table seed is the case's own (its place in DIMS and ROT_MODES), so a case gives the
            # same table whichever others run with it.
            case_seed = a.seed * 100 + DIMS.index(dims) * 10 + ROT_MODES.index(mode)
            res = run_case(x, dims, mode, table_dtype, case_seed, device, with_v4)
            bar.update()
            for ver, (metric, nz, mx) in res.items():
                flag = ""
                if (ver == "v5" and not metric <= threshold) or (ver == "ref" and metric != 0):
                    flag = "  FAIL"
                    failed.append(f"{dims}-{mode} ({ver})")
                line = f"{dims + '-' + mode:<16}{ver:<5}{metric:>18.6g}{nz:>12d}{mx:>14.6g}{flag}"
                if hasattr(bar, "write"):
                    bar.write(line)  # keeps the bar below the table
                else:
                    print(line)
    bar.close()
    if not with_v4:
        print("v4 (torch_npu.npu_rotary_mul) skipped: no torch_npu / NPU")
    if failed:
        print(f"FAILED: v5 above threshold, or ref not equal to the golden, in {', '.join(failed)}")
        return 1
    print("OK: v5 within threshold and ref equal to the golden in every case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
