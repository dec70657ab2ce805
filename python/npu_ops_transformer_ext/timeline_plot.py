"""Draws cores' pipes from a twin trace (``twin.run(..., timeline=True, trace=PATH)``) as an image.

    python -m npu_ops_transformer_ext.timeline_plot trace.json --cores AIC_0,AIV_0,AIV_1 --out core0.png
    python -m npu_ops_transformer_ext.timeline_plot trace.json --window 100,140 --out zoom.png

One row per (core, pipe) that ran anything, one bar per instruction, coloured by the API that
issued it; ``--window`` zooms to a time range in microseconds. The image format follows the
extension of ``--out``. Needs matplotlib. An option that cannot work (a trace that is missing or not
a twin trace, a ``--cores`` name it does not have (without ``--cores``, those of the default cores
it has are drawn), a window that is not START < END, an output that cannot be written) exits with 2
before anything is drawn.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from . import _cli

__all__ = ["main", "plot"]

_DEFAULT_CORES = ("AIC_0", "AIV_0", "AIV_1")
_WHAT = "expected the Chrome trace JSON of twin.run(..., timeline=True, trace=...)"


def _read_trace(trace: str) -> list[dict]:
    """The events of the trace file ``trace``; an OSError, or a ValueError saying what is wrong
    with it."""
    try:
        with open(trace) as f:
            data = json.load(f)
    except OSError as e:
        raise OSError(f"cannot read {trace}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{trace} is not JSON ({e}); {_WHAT}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) and "ph" in e for e in events):
        raise ValueError(f"{trace} has no list of traceEvents; {_WHAT}")
    return events


def _spans(events: list[dict], trace: str, cores: Sequence[str], window: tuple[float, float] | None):
    """``(pname, tname, rows)``: the process and thread names, and ``{(pid, tid): [(start, duration,
    api)]}`` of ``cores``' instructions (within ``window``); a ValueError when none of ``cores`` is
    in the trace, none of their instructions falls in the window, or an event lacks a field."""
    def bad(e: Exception) -> ValueError:
        return ValueError(f"{trace}: an event lacks a field or has one of the wrong type ({e!r}); {_WHAT}")

    try:
        pname = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e.get("name") == "process_name"}
        tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                 if e["ph"] == "M" and e.get("name") == "thread_name"}
        wanted = {pid for pid, n in pname.items() if n in cores}
    except (KeyError, TypeError) as e:
        raise bad(e) from None
    if not wanted:
        raise ValueError(f"none of the cores {', '.join(cores)} is in {trace} (it has "
                         f"{', '.join(sorted(map(str, pname.values()))) or 'none'})")
    rows: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    try:
        for e in events:
            if e["ph"] != "X" or e["pid"] not in wanted:
                continue
            t0, dur = float(e["ts"]), float(e["dur"])
            if window and (t0 + dur < window[0] or t0 > window[1]):
                continue
            rows.setdefault((e["pid"], e["tid"]), []).append((t0, dur, str(e["name"])))
    except (KeyError, TypeError, ValueError) as e:
        raise bad(e) from None
    if not rows:
        where = f" between {window[0]:g} and {window[1]:g} us" if window else ""
        raise ValueError(f"no instruction of {', '.join(cores)} in {trace}{where}")
    return pname, tname, rows


def plot(trace: str, out: str, cores: Sequence[str] = _DEFAULT_CORES,
         window: tuple[float, float] | None = None, title: str = "") -> None:
    """Writes the image ``out`` (its format follows the extension) of ``cores``' pipes in
    ``trace`` (times in us; ``window`` zooms). A ValueError when the trace has none of ``cores`` or
    nothing of theirs in ``window``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt

    cores = list(cores)
    pname, tname, rows = _spans(_read_trace(trace), trace, cores, window)
    order = sorted(rows, key=lambda k: (cores.index(pname[k[0]]), k[1]))
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
    drawn = [c for c in cores if c in {pname[p] for p, _ in order}]
    ax.set_title(title or f"twin timeline: {', '.join(drawn)}", fontsize=10)
    handles = [matplotlib.patches.Patch(color=colour[a], label=a) for a in apis]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.02 * len(order) / 4),
              ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m npu_ops_transformer_ext.timeline_plot --help``. Returns the exit
    status (2 when matplotlib is missing; an option that cannot work exits with 2 through
    ``argparse``'s ``error``)."""
    ap = argparse.ArgumentParser(prog="python -m npu_ops_transformer_ext.timeline_plot", description=__doc__,
                                 allow_abbrev=False, formatter_class=_cli.HelpFormatter)
    ap.add_argument("trace", help="Chrome trace JSON written by twin.run(..., timeline=True, trace=...)")
    ap.add_argument("--cores", default=None,
                    help=f"comma list of core names to draw, each in the trace (default: those of "
                    f"{','.join(_DEFAULT_CORES)} the trace has)")
    ap.add_argument("--window", default="",
                    help="START,END in microseconds, finite, START < END (default: the whole run)")
    ap.add_argument("--title", default="", help="plot title (default: the cores drawn)")
    ap.add_argument("--out", default="timeline.png",
                    help="image to write (the format follows the extension: png, svg, pdf, ...)")
    a = ap.parse_args(argv)
    given = a.cores is not None
    cores = list(dict.fromkeys(c.strip() for c in a.cores.split(",") if c.strip())) if given else list(_DEFAULT_CORES)
    if not cores:
        ap.error(f"--cores: give at least one core name (AIC_0, AIV_0, ...), got {a.cores!r}")
    window = None
    if a.window:
        try:
            lo, hi = (float(v) for v in a.window.split(","))
        except ValueError:
            ap.error(f"--window takes START,END in microseconds, got {a.window!r}")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            ap.error(f"--window takes finite START < END in microseconds, got {a.window!r}")
        window = (lo, hi)
    try:
        pname, _, _ = _spans(_read_trace(a.trace), a.trace, cores, window)
    except (OSError, ValueError) as e:
        ap.error(str(e))
    have = sorted(map(str, pname.values()))
    missing = [c for c in cores if c not in have]
    if missing and given:  # of the default cores, those the trace has are drawn
        ap.error(f"--cores: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in {a.trace} "
                 f"(it has {', '.join(have)})")
    _cli.check_output_path(ap, "--out", a.out, image=True)
    try:
        plot(a.trace, a.out, cores, window, a.title)
    except ImportError as e:
        if "matplotlib" not in str(e):
            raise
        print("error: matplotlib is not installed; install it with `pip install matplotlib`", file=sys.stderr)
        return 2
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
