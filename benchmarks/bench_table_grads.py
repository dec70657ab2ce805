"""Training step cost of rope_matrix on CPU: forward alone, forward + backward for x, and forward +
backward with sin and cos requiring grad (their gradients summed over B and N), median of
repeated calls.

    python benchmarks/bench_table_grads.py                      # bf16 x, [1, 24, S, 128] and [4, 32, 2048, 128]
    python benchmarks/bench_table_grads.py --dtype float32 --repeat 15
"""
from __future__ import annotations

import argparse
import statistics
import time

import npu_ops_transformer_ext as ext
import torch
from npu_ops_transformer_ext import _cli, tables

SHAPES = [(1, 24, 1024, 128), (1, 24, 8192, 128), (4, 32, 2048, 128)]


def _median_ms(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def run(shape, dtype, repeat: int) -> dict[str, float]:
    _b, _n, s, d = shape
    gen = torch.Generator().manual_seed(0)
    t = tables.rope_1d(s, d, mode="half")
    x = torch.randn(shape, generator=gen).to(dtype).requires_grad_()
    g = torch.randn(shape, generator=gen).to(dtype)
    sin, cos = t.sin.clone().requires_grad_(), t.cos.clone().requires_grad_()

    def forward():
        with torch.no_grad():
            ext.rope_matrix(x, t.mat, t.sin, t.cos)

    def x_only():
        x.grad = None
        ext.rope_matrix(x, t.mat, t.sin, t.cos).backward(g)

    def with_tables():
        x.grad = sin.grad = cos.grad = None
        ext.rope_matrix(x, t.mat, sin, cos).backward(g)

    return {name: _median_ms(fn, repeat) for name, fn in
            (("forward", forward), ("fwd+bwd x", x_only), ("fwd+bwd x, sin, cos", with_tables))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=_cli.HelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"], help="dtype of x")
    ap.add_argument("--repeat", type=int, default=9, help="timed calls per figure (the median is printed)")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {a.repeat}")
    print(f"median ms, x {a.dtype} BNSD, fp32 tables [S, D], half mode, {torch.get_num_threads()} threads, "
          f"git {_cli.git_revision()}")
    print(f"{'shape':>22} {'forward':>9} {'fwd+bwd x':>10} {'fwd+bwd x, sin, cos':>20}")
    for shape in SHAPES:
        r = run(shape, getattr(torch, a.dtype), a.repeat)
        print(f"{list(shape)!s:>22} {r['forward']:>9.2f} {r['fwd+bwd x']:>10.2f} {r['fwd+bwd x, sin, cos']:>20.2f}")


if __name__ == "__main__":
    main()
