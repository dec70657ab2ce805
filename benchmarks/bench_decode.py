"""Per-call time of rope_matrix at decode sizes (one new token per sequence), where the call's fixed
costs matter more than memory traffic, against a single ``torch.mul`` of the same tensors.

    python benchmarks/bench_decode.py [--heads 32] [--batches 1,8] [--calls 5000] [--repeats 3]
                                      [--steps 2000] [--start 4096]

x is ``[B, heads, 1, D]`` bf16 and the tables ``[B, 1, 1, D]`` bf16; no input requires grad. For
each B it prints microseconds per call of ``rope_matrix``, ``rope_matrix_qk`` (q and k of x's
shape), ``torch.mul(x, cos)`` (the reference: one of torch's own smallest ops on the same tensors)
and the seed's small-op form (v1, fp32 math), in grad mode and under ``torch.inference_mode()``,
and the ratio rope_matrix ÷ torch.mul, one line per B. Each figure is the best of five loops of
``--calls`` calls; with ``--repeats`` > 1 the whole measurement is repeated, each figure is the best
of the repeats and the min–max of the ratio over the repeats is shown too.

Then the per-step time of a KV-cache decode step with ``RotaryEmbedding`` (q ``[B, 1, 32, 128]``,
k ``[B, 1, 8, 128]`` bf16, BSND, ``rope(q, k, offset=n)`` with n growing by one per step from
--start), under torch.inference_mode(): the module's cached tables (sliced per step) against
building the step's tables with ``rope_1d`` every step.
"""
import argparse
import time

import npu_ops_transformer_ext  # noqa: F401  (registers the op)
import torch
from npu_ops_transformer_ext import _cli
from npu_ops_transformer_ext.reference import mode_matrix
from npu_ops_transformer_ext.tables import RotaryEmbedding, for_layout, rope_1d

op = torch.ops.npu_ops_transformer_ext.rope_matrix
op_qk = torch.ops.npu_ops_transformer_ext.rope_matrix_qk


def per_call_us(fn, calls):
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def measure(b, heads, d, calls):
    """{(context, provider): us per call} for one batch size."""
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    x = torch.randn(b, heads, 1, d).bfloat16()
    k = torch.randn(b, heads, 1, d).bfloat16()
    sin = torch.randn(b, 1, 1, d).bfloat16()
    cos = torch.randn(b, 1, 1, d).bfloat16()

    def v1():
        x1, x2 = x.chunk(2, -1)
        return (x.float() * cos + torch.cat([-x2, x1], -1).float() * sin).bfloat16()

    fns = {
        "rope_matrix": lambda: op(x, y, sin, cos),
        "rope_matrix_qk": lambda: op_qk(x, k, y, sin, cos),
        "torch.mul": lambda: torch.mul(x, cos),
        "v1": v1,
    }
    res = {}
    for ctx_name, ctx in (("grad", torch.enable_grad), ("inference_mode", torch.inference_mode)):
        with ctx():
            for name, fn in fns.items():
                res[(ctx_name, name)] = per_call_us(fn, calls)
    return res


def _positive_list(text):
    """The distinct positive integers of a comma list, in order; None when it has none or another entry."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        return None
    return list(dict.fromkeys(values)) if values and min(values) >= 1 else None


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python benchmarks/bench_decode.py",
        description=__doc__.split("\n\n")[0],  # the first paragraph: what it measures
        formatter_class=_cli.HelpFormatter, allow_abbrev=False,
    )
    ap.add_argument("--heads", type=int, default=32, help="heads N of x (and of q)")
    ap.add_argument("--dim", type=int, default=128, help="head dim D, even (the half rotation turns pairs)")
    ap.add_argument("--batches", default="1,8", help="comma list of batch sizes B")
    ap.add_argument("--calls", type=int, default=5000, help="calls per timed loop (each figure: the best of five loops)")
    ap.add_argument("--repeats", type=int, default=1, help="repeat the whole measurement, report the spread")
    ap.add_argument("--steps", type=int, default=2000, help="decode steps per loop")
    ap.add_argument("--start", type=int, default=4096, help="first decode position")
    args = ap.parse_args(argv)
    for name in ("heads", "calls", "repeats", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.dim < 2 or args.dim % 2:
        ap.error(f"--dim must be an even number >= 2 (the half rotation turns pairs of elements), got {args.dim}")
    if args.start < 0:
        ap.error(f"--start must be >= 0, got {args.start}")
    batches = _positive_list(args.batches)
    if batches is None:
        ap.error(f"--batches takes a comma list of positive integers B, got {args.batches!r}")
    args.batches = batches
    d = args.dim
    print(f"per call (us), x [B, {args.heads}, 1, {d}] bf16, tables [B, 1, 1, {d}] bf16, no input requires "
          f"grad; {torch.get_num_threads()} threads, torch {torch.__version__}; "
          "inf = under torch.inference_mode(), op/mul = rope_matrix / torch.mul")
    ctxs = (("grad", ""), ("inference_mode", " inf"))
    cols = [f"{p}{suffix}" for _, suffix in ctxs for p in ("op", "mul", "op/mul")]
    cols += [f"{p}{suffix}" for p in ("qk", "v1") for _, suffix in ctxs]
    print("   B" + "".join(f"{c:>11}" for c in cols) + ("   op/mul min-max (grad, inf)" if args.repeats > 1 else ""))
    for b in args.batches:
        runs = [measure(b, args.heads, d, args.calls) for _ in range(args.repeats)]
        best = {key: min(r[key] for r in runs) for key in runs[0]}
        vals, spread = [], []
        for ctx, _ in ctxs:
            op_us, mul_us = best[(ctx, "rope_matrix")], best[(ctx, "torch.mul")]
            vals += [op_us, mul_us, op_us / mul_us]
            ratios = [r[(ctx, "rope_matrix")] / r[(ctx, "torch.mul")] for r in runs]
            spread.append(f"{min(ratios):.2f}-{max(ratios):.2f}")
        vals += [best[(ctx, p)] for p in ("rope_matrix_qk", "v1") for ctx, _ in ctxs]
        line = f"{b:>4}" + "".join(f"{v:>11.2f}" for v in vals)
        if args.repeats > 1:
            line += "   " + ", ".join(spread)
        print(line)
    decode_steps(args)


def per_step_us(step, start, steps):
    """Best of five loops of ``steps`` decode steps at positions start, start + 1, ..."""
    step(start)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for n in range(start, start + steps):
            step(n)
        best = min(best, (time.perf_counter() - t) / steps * 1e6)
    return best


def decode_steps(args):
    d = args.dim
    print(f"\nRotaryEmbedding decode step, q [B, 1, {args.heads}, {d}], k [B, 1, 8, {d}] bf16 BSND, "
          f"offset from {args.start}, best of five loops of {args.steps} steps, inference_mode")
    print(f"{'B':>4}{'cached tables us':>18}{'rebuilt per step us':>21}")
    for b in args.batches:
        q = torch.randn(b, 1, args.heads, d).bfloat16()
        k = torch.randn(b, 1, 8, d).bfloat16()
        rope = RotaryEmbedding(d, layout="BSND")

        def cached(n, q=q, k=k, rope=rope):
            return rope(q, k, offset=n)

        def rebuilt(n, q=q, k=k):
            t = rope_1d(1, d, offset=n)
            return torch.ops.npu_ops_transformer_ext.rope_matrix_qk(
                q, k, t.mat, for_layout(t.sin, "BSND"), for_layout(t.cos, "BSND")
            )

        with torch.inference_mode():
            c = per_step_us(cached, args.start, args.steps)
            r = per_step_us(rebuilt, args.start, args.steps)
        print(f"{b:>4}{c:>18.1f}{r:>21.1f}")


if __name__ == "__main__":
    main()
