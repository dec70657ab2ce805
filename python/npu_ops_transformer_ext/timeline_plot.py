"""Draws cores' pipes from a twin trace (``twin.run(..., timeline=True, trace=PATH)``) as a PNG.

    python -m npu_ops_transformer_ext.timeline_plot trace.json --cores AIC_0,AIV_0,AIV_1 --out core0.png
    python -m npu_ops_transformer_ext.timeline_plot trace.json --window 100,140 --out zoom.png

One row per (core, pipe) that ran anything, one bar per instruction, coloured by the API that
issued it; ``--window`` zooms to a time range in microseconds. Needs matplotlib.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

__all__ = ["main", "plot"]


def plot(trace: str, out: str, cores: Sequence[str] = ("AIC_0", "AIV_0", "AIV_1"),
         window: tuple[float, float] | None = None, title: str = "") -> None:
    """Writes the PNG ``out`` of ``cores``' pipes in ``trace`` (times in us; ``window`` zooms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    wanted = {pid for pid, n in pname.items() if n in cores}
    if not wanted:
        raise ValueError(f"none of the cores {list(cores)} is in {trace} (it has {sorted(pname.values())})")
    rows: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for e in events:
        if e["ph"] != "X" or e["pid"] not in wanted:
            continue
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        if window and (t1 < window[0] or t0 > window[1]):
            continue
        rows.setdefault((e["pid"], e["tid"]), []).append((t0, e["dur"], e["name"]))
    order = sorted(rows, key=lambda k: (list(cores).index(pname[k[0]]), k[1]))
    apis = sorted({name for spans in rows.values() for _, _, name in spans})
    cmap = plt.get_cmap("tab20")
    colour = {a: cmap(i % 20) for i, a in enumerate(apis)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(order) + 1.6))
    for i, key in enumerate(order):
        spans = rows[key]
        ax.broken_barh([(t, max(d, 1e-4)) for t, d, _ in spans], (i - 0.4, 0.8),
                       facecolors=[colour[n] for _, _, n in spans], linewidth=0)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"{pname[p]} {tname.get((p, t), t)}" for p, t in order], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time since kernel start (us, predicted)")
    if window:
        ax.set_xlim(*window)
    ax.set_title(title or f"twin timeline: {', '.join(cores)}", fontsize=10)
    handles = [matplotlib.patches.Patch(color=colour[a], label=a) for a in apis]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.02 * len(order) / 4),
              ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m npu_ops_transformer_ext.timeline_plot --help``."""
    ap = argparse.ArgumentParser(prog="python -m npu_ops_transformer_ext.timeline_plot", description=__doc__,
                                 allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="Chrome trace JSON written by twin.run(..., timeline=True, trace=...)")
    ap.add_argument("--cores", default="AIC_0,AIV_0,AIV_1", help="comma list of core names to draw")
    ap.add_argument("--window", default="", help="START,END in microseconds (default: the whole run)")
    ap.add_argument("--title", default="", help="plot title")
    ap.add_argument("--out", default="timeline.png", help="PNG to write")
    a = ap.parse_args(argv)
    window = None
    if a.window:
        try:
            lo, hi = (float(v) for v in a.window.split(","))
        except ValueError:
            ap.error(f"--window takes START,END in microseconds, got {a.window!r}")
        window = (lo, hi)
    plot(a.trace, a.out, [c for c in a.cores.split(",") if c], window, a.title)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
