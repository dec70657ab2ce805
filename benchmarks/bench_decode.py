"""Per-call time of rope_matrix at decode sizes (one new token per sequence), where the call's fixed
costs matter more than memory traffic. Compares with the seed's small-op form (v1) in fp32.

    python benchmarks/bench_decode.py [--heads 32] [--batches 1,8] [--calls 5000]

Prints the best of five loops of --calls calls each, in microseconds per call, in grad mode and
under torch.inference_mode() (which skips the autograd layer, registered in Python).
"""
import argparse
import time

import npu_ops_transformer_ext  # noqa: F401  (registers the op)
import torch
from npu_ops_transformer_ext.reference import mode_matrix

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


if __name__ == "__main__":
    main()
