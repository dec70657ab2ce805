"""Per-call time of rope_matrix at decode sizes (one new token per sequence), where the call's fixed
costs matter more than memory traffic. Compares with the seed's small-op form (v1) in fp32.

    python benchmarks/bench_decode.py [--heads 32] [--batches 1,8] [--calls 5000] [--steps 2000]

Prints the best of five loops of --calls calls each, in microseconds per call, in grad mode and
under torch.inference_mode() (which skips the autograd layer, registered in Python).

Then the per-step time of a KV-cache decode step with ``RotaryEmbedding`` (q ``[B, 1, 32, 128]``,
k ``[B, 1, 8, 128]`` bf16, BSND, ``rope(q, k, offset=n)`` with n growing by one per step from
--start), under torch.inference_mode(): the module's cached tables (sliced per step) against
building the step's tables with ``rope_1d`` every step.
"""
import argparse
import time

import npu_ops_transformer_ext  # noqa: F401  (registers the op)
import torch
from npu_ops_transformer_ext.reference import mode_matrix
from npu_ops_transformer_ext.tables import RotaryEmbedding, for_layout, rope_1d

op = torch.ops.npu_ops_transformer_ext.rope_matrix


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=2000, help="decode steps per loop (default 2000)")
    ap.add_argument("--start", type=int, default=4096, help="first decode position (default 4096)")
    args = ap.parse_args()
    d = args.dim
    y = mode_matrix("half", [d])
    print(f"rope_matrix per call, x [B, {args.heads}, 1, {d}] bf16, tables [B, 1, 1, {d}] bf16, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{'B':>4}{'op us':>10}{'op inference_mode':>20}{'v1 us':>10}{'v1 inference_mode':>20}")
    for b in (int(v) for v in args.batches.split(",")):
        x = torch.randn(b, args.heads, 1, d).bfloat16()
        sin = torch.randn(b, 1, 1, d).bfloat16()
        cos = torch.randn(b, 1, 1, d).bfloat16()

        def v1(x=x, sin=sin, cos=cos):
            x1, x2 = x.chunk(2, -1)
            return (x.float() * cos + torch.cat([-x2, x1], -1).float() * sin).bfloat16()

        def ours(x=x, sin=sin, cos=cos):
            return op(x, y, sin, cos)

        a, e = per_call_us(ours, args.calls), per_call_us(v1, args.calls)
        with torch.inference_mode():
            ai, ei = per_call_us(ours, args.calls), per_call_us(v1, args.calls)
        print(f"{b:>4}{a:>10.1f}{ai:>20.1f}{e:>10.1f}{ei:>20.1f}")
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
    for b in (int(v) for v in args.batches.split(",")):
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
