"""Benchmark CLI: rope_matrix against the ways people write RoPE today, and against the memory floor.

    python -m npu_ops_transformer_ext.bench                       # the default table, CPU
    python -m npu_ops_transformer_ext.bench --shape 1,24,8192,128 --modes half,3d --iters 30 --csv out.csv

Providers (each computes the same result for the given mode):
    rope_matrix   this operator (large outputs reuse freed output buffers, see the README)
    rope_matrix_nocache  this operator with that cache off (NPU_OPS_CPU_OUTPUT_CACHE_MB=0): every
                  call maps fresh output memory, as clone does
    eager_v1      eager small ops in x.dtype (split, rotate_half / rotate_every_two, concat) -- seed v1
    eager_v3      eager matrix form in x.dtype, ``x*cos + (x@R)*sin`` -- seed v3
    compile_v1    torch.compile of eager_v1
    clone         ``x.clone()``: a same-size copy into a new tensor (the floor for any op that
                  returns a new tensor: it reads x, allocates and writes the output)
    copy_         ``out.copy_(x)`` into a preallocated tensor (pure read + write bandwidth)
    rope_matrix_qk  the fused q/k call with k a copy of x (q + k bytes)
    limit, limit_qk  the memory limit for x's (q + k's) bytes: a native copy with the tables read
                  once (sweep.py); the ``/limit`` column divides by it
    --sweep       runs ``python -m npu_ops_transformer_ext.sweep`` with the other options instead
    --npu-model   prints the twin's predicted NPU times instead (every mode x {perm, MIX}, the seed
                  shape by default, beside the seed's measured 910B rows; see
                  ``--npu-model --help``, the same as ``python -m npu_ops_transformer_ext.npu_model --help``)

Prints a table and writes a long-format CSV (one row per mode and provider): median and p20/p80
in ms, achieved GB/s (x read + output written + tables read once), ratios to ``clone`` and
``copy_``, package version, git revision (``unknown`` when neither a checkout nor the wheel knows
it), torch version, CPU model and thread count. ``python -m npu_ops_transformer_ext.plot CSV``
draws it. Long runs show a progress bar with an estimate of the time left (with tqdm installed).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from . import (
    _cli,
    ops,  # noqa: F401  (registers the op)
    sweep,
)
from .reference import mode_matrix, rope_v1, rope_v3

__all__ = ["MODES", "PROVIDERS", "main", "run"]

# {name: (rotation, sections)}: rotation None for a dense matrix (any D); sections None for one
# section of the whole D (half and interleave: any even D), else a fixed split (3d: D = 128 only).
MODES = {
    "half": ("half", None),
    "interleave": ("interleave", None),
    "3d": ("half", [44, 44, 40]),
    "dense": (None, None),
}
FAST = ("rope_matrix", "rope_matrix_nocache", "clone", "copy_", "rope_matrix_qk", "limit", "limit_qk")
PROVIDERS = ["rope_matrix", "rope_matrix_nocache", "eager_v1", "eager_v3", "compile_v1", "clone", "copy_",
             "rope_matrix_qk", "limit", "limit_qk"]  # limit*: the memory limit, see sweep.py


def _time_round_robin(fns: dict, warmup: int, iters: int, bar: Any = None) -> dict:
    """{name: (median, p20, p80)} ms of _cli.time_round_robin: one call of each provider per round,
    each round in a new order."""
    return {name: r[:3] for name, r in _cli.time_round_robin(fns, warmup, iters, bar=bar).items()}


def _without_output_cache(fn):
    def call():
        old = os.environ.get("NPU_OPS_CPU_OUTPUT_CACHE_MB")
        os.environ["NPU_OPS_CPU_OUTPUT_CACHE_MB"] = "0"
        try:
            return fn()
        finally:
            if old is None:
                del os.environ["NPU_OPS_CPU_OUTPUT_CACHE_MB"]
            else:
                os.environ["NPU_OPS_CPU_OUTPUT_CACHE_MB"] = old

    return call


def _providers(mode_name, x, y, sin, cos, sections, rot_mode):
    out = torch.empty_like(x)
    ours = lambda: torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos)
    fns = {
        "rope_matrix": ours,
        "rope_matrix_nocache": _without_output_cache(ours),
        "eager_v3": lambda: rope_v3(x, sin, cos, y, compute_dtype=None),
        "clone": lambda: x.clone(),
        "copy_": lambda: out.copy_(x),
        **sweep.bench_providers(x, y, sin, cos),
    }
    if rot_mode is not None:
        fns["eager_v1"] = lambda: rope_v1(x, sin, cos, rot_mode, sections, compute_dtype=None)
        compiled = torch.compile(lambda a, s, c: rope_v1(a, s, c, rot_mode, sections, compute_dtype=None))
        fns["compile_v1"] = lambda: compiled(x, sin, cos)
    return fns


def run(
    shape: Sequence[int],
    dtype: torch.dtype,
    modes: Sequence[str],
    providers: Sequence[str],
    warmup: int,
    iters: int,
    csv_path: str | None,
    progress: str = "auto",
) -> list[dict]:
    """Times ``providers`` on a BNSD x of ``shape`` and ``dtype`` for each of ``modes``; prints the
    table, writes the CSV to ``csv_path`` (none when empty) and returns its rows. ``progress``:
    auto, on or off (see ``--progress``)."""
    b, n, s, d = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, n, s, d, generator=g).to(dtype)
    sin = torch.randn(1, 1, s, d, generator=g).to(dtype)
    cos = torch.randn(1, 1, s, d, generator=g).to(dtype)
    meta = {
        "version": _cli.package_version(), "git": _cli.git_revision(), "torch": torch.__version__,
        "cpu": _cli.cpu_model(), "cpu_tuning": _cli.cpu_tuning(), "threads": torch.get_num_threads(),
        "dtype": str(dtype).replace("torch.", ""), "shape": "x".join(map(str, shape)), "layout": "BNSD",
    }
    rows = []
    calls = sum(
        (warmup + iters) * len([p for p in providers if MODES[m][0] is not None or p not in ("eager_v1", "compile_v1")])
        for m in modes
    )
    bar = _cli.progress(calls, "bench", progress)
    for mode_name in modes:
        bar.set_postfix_str(mode_name)
        rot_mode = MODES[mode_name][0]
        sections = _cli.mode_sections(mode_name, MODES, d)
        if rot_mode is None:
            y = (torch.randn(d, d, generator=g) / d**0.5).to(dtype)
        else:
            y = mode_matrix(rot_mode, sections, dtype=dtype)
        fns = _providers(mode_name, x, y, sin, cos, sections, rot_mode)
        # Round-robin within two groups: the memory-bound ones (this op and the copy floors), whose
        # ratios are the point, and the slow eager ones, whose large temporaries would otherwise
        # flush the caches between every two calls of the fast ones.
        chosen = [p for p in providers if p in fns]
        results = {}
        for group in ([p for p in chosen if p in FAST], [p for p in chosen if p not in FAST]):
            if group:
                results.update(_time_round_robin({p: fns[p] for p in group}, warmup, iters, bar))
        results = {p: results[p] for p in chosen}
        for p, (med, p20, p80) in results.items():
            row = {
                "op": "rope_matrix", "mode": mode_name, "provider": p, "median_ms": _sig(med),
                "p20_ms": _sig(p20), "p80_ms": _sig(p80), "gbps": _sig(sweep.moved_bytes(p, x, (sin, cos)) / med / 1e6),
                "x_limit": _sig(med / results[sweep.limit_of(p)][0], 3) if sweep.limit_of(p) in results else "",
                "x_clone": _sig(med / results["clone"][0], 3) if "clone" in results else "",
                "x_copy": _sig(med / results["copy_"][0], 3) if "copy_" in results else "",
                **meta,
            }
            rows.append(row)
    bar.close()
    # every column after the first two starts with a space, so that no value runs into the last
    header = (f"{'mode':<11}{'provider':<21}{'median ms':>11}{'p20':>11}{'p80':>11}{'GB/s':>9}{'/clone':>9}"
              f"{'/copy_':>9}{'/limit':>9}")
    print(f"rope_matrix benchmark: x {list(shape)} {meta['dtype']} BNSD, tables [1,1,S,D]; "
          f"{meta['cpu']}, {meta['threads']} threads, torch {meta['torch']}, "
          f"npu_ops_transformer_ext {meta['version']} (git {meta['git']})")
    print(header)
    for r in rows:
        print(f"{r['mode']:<11}{r['provider']:<21} {_fixed(r['median_ms']):>10} {_fixed(r['p20_ms']):>10}"
              f" {_fixed(r['p80_ms']):>10}"
              f" {r['gbps']:>8.3g} {r['x_clone']!s:>8} {r['x_copy']!s:>8} {r['x_limit']!s:>8}")
    if csv_path:
        os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {csv_path}")
    return rows


def _sig(value: float, digits: int = 4) -> float:
    """``value`` kept to ``digits`` significant digits (a fixed number of decimals would print a
    tiny shape's GB/s or a fast provider's time as 0)."""
    return float(f"{value:.{digits}g}")


def _fixed(value: float, digits: int = 4) -> str:
    """``value`` printed with ``digits`` significant digits in fixed-point notation (1.940, 0.005795,
    1234): two decimals printed a small shape's times as 0.00."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.{max(0, digits - 1 - math.floor(math.log10(abs(value))))}f}"


def main(argv: Sequence[str] | None = None) -> object:
    """Command line: ``python -m npu_ops_transformer_ext.bench --help``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "--sweep" in args:  # the size sweep against the memory limit (sweep.py has its own options)
        return sweep.main([v for v in args if v != "--sweep"])
    if "--npu-model" in args:  # the twin's timing model (npu_model.py has its own options)
        from . import npu_model

        return npu_model.main([v for v in args if v != "--npu-model"])
    ap = argparse.ArgumentParser(
        prog="python -m npu_ops_transformer_ext.bench",
        allow_abbrev=False,  # an abbreviation (--swe for --sweep) would slip past the hand-off checks
        description=__doc__,
        formatter_class=_cli.HelpFormatter,
    )
    ap.add_argument("--shape", default="1,24,8192,128", help="B,N,S,D of the BNSD x")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                    help="dtype of x, the tables and the matrix")
    ap.add_argument("--modes", default="half,interleave,3d,dense",
                    help=f"comma list, each one of: {', '.join(MODES)} (3d needs D = 128, half and "
                    "interleave an even D, dense any D)")
    ap.add_argument("--providers", default=",".join(PROVIDERS),
                    help=f"comma list, each one of: {', '.join(PROVIDERS)}")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per provider and mode")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per provider and mode")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads, from 1 to torch's default (0: torch's default)")
    ap.add_argument("--csv", default="bench_results/rope_matrix_cpu.csv",
                    help="CSV file to write ('' for none)")
    _cli.add_progress_option(ap)
    ap.add_argument("--sweep", action="store_true",
                    help="run python -m npu_ops_transformer_ext.sweep with the other options instead "
                    "(see its --help)")
    ap.add_argument("--npu-model", action="store_true",
                    help="print the CPU twin's predicted NPU times instead (see --npu-model --help)")
    a = ap.parse_args(args)
    if a.threads < 0:
        ap.error(f"--threads must be >= 1, or 0 for torch's default, got {a.threads}")
    if a.threads > torch.get_num_threads():  # as the sweep, which leaves such counts out
        ap.error(f"--threads {a.threads} is above this process's {torch.get_num_threads()} (torch's "
                 "default): it would time the oversubscribed machine; give at most that, or 0")
    shape = _cli.parse_shape(ap, a.shape)
    d = shape[3]
    x_bytes = shape[0] * shape[1] * shape[2] * d * getattr(torch, a.dtype).itemsize
    problem = _cli.memory_problem(f"--shape {a.shape}", 2 * x_bytes, f"x and its output in {a.dtype}")
    if problem:
        ap.error(problem)
    modes = _cli.parse_modes(ap, a.modes, MODES)
    if not modes:
        ap.error(f"--modes: give at least one of {', '.join(MODES)}")
    fit = [m for m in MODES if not _cli.mode_problem(m, MODES, d)]
    for m in modes:
        problem = _cli.mode_problem(m, MODES, d)
        if problem:
            ap.error(f"--modes {m} {problem}, got D = {d} from --shape {a.shape}; at this D choose "
                     f"from {', '.join(fit)}")
    providers = list(dict.fromkeys(p for p in a.providers.split(",") if p))  # each once, in order
    for p in providers:
        if p not in PROVIDERS:
            ap.error(f"unknown provider {p!r}; choose from {', '.join(PROVIDERS)}")
    if not providers:
        ap.error(f"--providers: give at least one of {', '.join(PROVIDERS)}")
    if not any(MODES[m][0] is not None or p not in ("eager_v1", "compile_v1") for m in modes for p in providers):
        ap.error(f"--providers {','.join(providers)} time nothing for --modes {','.join(modes)} "
                 "(eager_v1 and compile_v1 have no dense form)")
    if a.iters < 1 or a.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    if a.csv:
        _cli.check_output_path(ap, "--csv", a.csv)
    before = torch.get_num_threads()
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        run(shape, getattr(torch, a.dtype), modes, providers, a.warmup, a.iters, a.csv, a.progress)
    finally:
        torch.set_num_threads(before)  # (a later call in this process starts from the same count)
    return None


if __name__ == "__main__":
    main()
