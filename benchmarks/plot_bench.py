"""Draws the CSV written by ``python -m npu_ops_transformer_ext.bench``: one bar group per mode,
one bar per provider, time relative to the copy_ floor (log scale). Needs matplotlib.

    python benchmarks/plot_bench.py bench_results/rope_matrix_cpu.csv [-o bench.png]
"""
import argparse
import csv
from collections import defaultdict

ORDER = ["rope_matrix", "rope_matrix_nocache", "compile_v1", "eager_v3", "eager_v1", "clone", "copy_"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("-o", "--out", default="bench_results/rope_matrix_cpu.png")
    a = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = defaultdict(dict)
    meta = {}
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            data[row["mode"]][row["provider"]] = float(row["x_copy"] or "nan")
            meta = row
    modes = list(data)
    providers = [p for p in ORDER if any(p in data[m] for m in modes)]
    width = 0.8 / max(1, len(providers))
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, p in enumerate(providers):
        ax.bar([m + i * width for m in range(len(modes))], [data[mo].get(p, float("nan")) for mo in modes],
               width, label=p)
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(modes))], modes)
    ax.set_yscale("log")
    ax.set_ylabel("time / copy_ (lower is better)")
    ax.set_title(f"rope_matrix, x {meta.get('shape')} {meta.get('dtype')}, {meta.get('cpu')}, {meta.get('threads')} threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
