"""The operator against the machine's memory limit, from cache-resident to DRAM-sized tensors.

    python -m npu_ops_transformer_ext.sweep                     # the full grid (several minutes)
    python -m npu_ops_transformer_ext.bench --sweep             # the same
    python -m npu_ops_transformer_ext.sweep --sizes 256,4096 --dtypes bfloat16 --layouts bnsd \\
        --modes half --threads all --iters 5                    # a small grid

**The limit.** ``_stream_copy_new`` (cpu_kernel/stream_copy.cpp) is a native copy of x into a new
output, allocated as ``rope_matrix`` allocates its own (so both write equally warm memory), on the
operator's threads, with each table read once: exactly the bytes a ``rope_matrix`` call moves, and
nothing else. It is timed with ordinary stores and, as ``_stream_copy`` into an output of its own,
with non-temporal (streaming) stores, both in the round robin with the providers, and the faster of
the two (by median) is the limit for that cell (streaming wins once the output no longer fits in
cache, ordinary stores while it does). The streaming copy writes its own output because streaming
stores evict the lines they write: into the buffer every ``rope_matrix`` call of the round reuses,
they left the next call's output out of cache, so that a cell of cache-resident size measured a
call on a cold output (bf16 x ``[1, 24, 256, 128]``, 2 threads, the op and both limits timed
round-robin in one process: BSND half 31.7 against 24.9 us, BNSD 37.5 against 28.6 us, the limit
18.0 and 17.3 us). Every provider is reported as its
time ÷ the limit; ``copy_`` (torch's ``out.copy_(x)``) is one more provider, no longer the
denominator. ``rope_matrix_qk`` (q and k of x's shape, one pass over the tables) is measured against
the limit for q + k bytes.

**The grid.** x is ``[1, N, S, D]`` (BNSD) or ``[1, S, N, D]`` (BSND) with B·N = 24 and D = 128 by
default, S from 256 (x = 1.5 MiB in bf16) to 32768 (192 MiB), dtypes bfloat16 / float16 /
float32, modes half / interleave / 3D (44+44+40 half), tables ``[S, D]`` in x's dtype (or float32
with ``--table-dtype float32``), torch threads 1, 2 and all. Within one (S, dtype, threads) cell
every provider is timed round-robin (one call of each per round), so that a change in machine load
affects them alike and the ratios stay meaningful; a cell runs at least ``--iters`` rounds and at
least ``--min-time`` seconds of them (hundreds of rounds for the small sizes), but no more than
5000 rounds for the time (a cell of very fast calls may then last less than ``--min-time``). Calls are warm (the same x every call: x stays
in cache where it fits), and every provider of a cell reads the same x memory: BSND x is the BNSD
tensor's buffer viewed as ``[1, S, N, D]``.

Writes a long-format CSV (one row per provider and cell: median and p20/p80 in ms, GB/s, ratio to
the limit (``x_limit``; ``x_limit_min`` of the fastest calls), to the streaming-store copy alone
(``x_limit_nt``: the limit as a copy with non-temporal stores, a weaker bar while the output fits
in cache) and to ``copy_``, the package version and git revision, the CPU model and the CPU
kernel's per-CPU tuning) and, with matplotlib installed,
a plot of ratio ÷ limit against x's size.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from . import (
    _cli,
    ops,  # noqa: F401  (registers the ops)
)
from .reference import mode_matrix

__all__ = ["bench_providers", "copy_fns", "limit_fn", "limit_of", "limit_variants", "main", "moved_bytes", "plot", "run_sweep"]

_ops = torch.ops.npu_ops_transformer_ext

SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
DTYPES = ["bfloat16", "float16", "float32"]
LAYOUTS = ["bnsd", "bsnd"]
# {name: (rotation, sections)}: sections None for one section of the whole D (any even D), else a
# fixed split (3d: D = 128 only); see _cli.mode_problem.
MODES = {"half": ("half", None), "interleave": ("interleave", None), "3d": ("half", [44, 44, 40])}


# ---- the limit ----------------------------------------------------------------------------------


def _median_time(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def copy_fns(
    xs: torch.Tensor | Sequence[torch.Tensor], tables: Sequence[torch.Tensor]
) -> dict[str, Callable[[], list[torch.Tensor]]]:
    """``{"nontemporal": fn, "temporal": fn}``: the limit's copy of x (or of each of several, e.g.
    q and k) in one parallel region, each of ``tables`` read once: with streaming stores into
    outputs of its own (allocated here, once), or with ordinary stores into new outputs allocated
    as ``rope_matrix`` allocates its own. Each fn returns the outputs it wrote."""
    srcs = [t.contiguous() for t in ([xs] if isinstance(xs, torch.Tensor) else xs)]
    tabs = [t.contiguous() for t in tables]
    own = [torch.empty_like(t) for t in srcs]

    def nontemporal() -> list[torch.Tensor]:
        _ops._stream_copy(srcs, own, tabs, True)
        return own

    return {"nontemporal": nontemporal,
            "temporal": lambda: _ops._stream_copy_new(srcs, tabs, False)}


def limit_fn(
    x: torch.Tensor | Sequence[torch.Tensor], tables: Sequence[torch.Tensor], calls: int = 7
) -> Callable[[], list[torch.Tensor]]:
    """A callable that moves the bytes of one ``rope_matrix(x, ...)`` call (of one
    ``rope_matrix_qk(q, k, ...)`` call for ``x = [q, k]``): x read, a new output of x's size
    written (allocated as ``rope_matrix`` allocates its own), each tensor of ``tables`` read once,
    natively, on torch's threads. Streaming or ordinary stores, whichever is faster here (timed on
    ``calls`` calls of each; the choice is the callable's ``.store`` attribute, ``"nontemporal"``
    or ``"temporal"``)."""
    return _faster_store(copy_fns(x, tables), calls)


def _faster_store(stores: dict[str, Callable[[], object]], calls: int = 7) -> Callable[[], object]:
    """The faster of copy_fns' two callables, timed here on ``calls`` calls each."""
    nt, t = stores["nontemporal"], stores["temporal"]
    for f in (nt, t, nt, t):
        f()
    faster_nt = _median_time(nt, calls) <= _median_time(t, calls)
    chosen = nt if faster_nt else t
    chosen.store = "nontemporal" if faster_nt else "temporal"
    return chosen


def limit_of(provider: str) -> str:
    """The limit provider a provider's time is divided by: q + k bytes for the fused q/k call."""
    return "limit_qk" if provider.startswith("rope_matrix_qk") else "limit"


def limit_providers(
    x: torch.Tensor, tables: Sequence[torch.Tensor], k: torch.Tensor | None = None
) -> dict[str, Callable[[], object]]:
    """``{"limit": fn}`` (and ``"limit_qk"`` for q = x and k) for a benchmark: limit_variants'
    faster store of each, chosen before the benchmark."""
    return {name: _faster_store(stores) for name, stores in limit_variants(x, tables, k).items()}


def limit_variants(
    x: torch.Tensor, tables: Sequence[torch.Tensor], k: torch.Tensor | None = None
) -> dict[str, dict[str, Callable[[], object]]]:
    """``{"limit": copy_fns(x), "limit_qk": copy_fns([x, k])}`` (the latter with k): both stores of
    each limit, for the sweep to time round-robin with the providers and keep the faster."""
    out = {"limit": copy_fns(x, tables)}
    if k is not None:
        out["limit_qk"] = copy_fns([x, k], tables)
    return out


def bench_providers(
    x: torch.Tensor, y: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor
) -> dict[str, Callable[[], object]]:
    """The providers ``bench`` adds to its table: ``rope_matrix_qk`` (q = x, k a copy of it), the
    limit for x's bytes and the limit for q + k bytes."""
    k = x.clone()
    fns = {"rope_matrix_qk": lambda: _ops.rope_matrix_qk(x, k, y, sin, cos)}
    fns.update(limit_providers(x, (sin, cos), k))
    return fns


def moved_bytes(provider: str, x: torch.Tensor, tables: Sequence[torch.Tensor]) -> int:
    """Bytes a provider's call must move: x read and written (twice that for q + k), tables read once."""
    qk = provider == "limit_qk" or limit_of(provider) == "limit_qk"  # q + k: the op and its limit
    n = 2 * x.numel() * x.element_size() * (2 if qk else 1)
    return n + sum(t.numel() * t.element_size() for t in tables)


# ---- the sweep ----------------------------------------------------------------------------------


def _time_round_robin(fns: dict, warmup: int, iters: int, min_time: float = 0.0) -> dict:
    """{name: (median, p20, p80, min) ms}: _cli.time_round_robin, at least ``iters`` rounds, more
    (up to 5000) until the rounds take ``min_time`` seconds; each round in a new order."""
    return _cli.time_round_robin(fns, warmup, iters, min_time)


def _thread_spec(spec: str) -> tuple[list[int], list[int]]:
    """``(counts, above)``: the distinct counts of ``spec`` ("1,2,all") up to torch's default, in
    order, and those above it (left out: more threads than the process has would time the
    machine's oversubscription). A ValueError for an entry that is neither an integer nor ``all``,
    and one naming every count below 1."""
    total = torch.get_num_threads()
    out, above, bad = [], [], []
    for v in spec.split(","):
        v = v.strip()
        if not v:
            continue
        try:
            n = total if v == "all" else int(v)
        except ValueError:
            raise ValueError(f"--threads: {v!r} is neither an integer nor 'all'") from None
        if n < 1:
            bad.append(v)
        elif n > total:
            above.append(n)
        elif n not in out:
            out.append(n)
    if bad:
        raise ValueError(f"--threads: {', '.join(bad)} {'is not a count' if len(bad) == 1 else 'are not counts'} "
                         "of threads (>= 1)")
    return out, list(dict.fromkeys(above))


def _thread_counts(spec: str) -> list[int]:
    """The distinct counts of ``spec`` ("1,2,all") from 1 to torch's default, in order; those above
    it are left out (see ``_thread_spec``). A ValueError for an entry that is neither an integer nor
    ``all``, or below 1."""
    return _thread_spec(spec)[0]


def run_sweep(
    sizes: Sequence[int] = SIZES,
    dtypes: Sequence[str] = DTYPES,
    layouts: Sequence[str] = LAYOUTS,
    modes: Sequence[str] = tuple(MODES),
    threads: str = "1,2,all",
    heads: int = 24,
    dim: int = 128,
    table_dtype: str = "same",
    qk: bool = True,
    copy: bool = True,
    warmup: int = 2,
    iters: int = 10,
    min_time: float = 0.3,
    progress: Callable[[str], object] | None = print,
) -> list[dict]:
    """Runs the grid and returns one dict per (cell, provider); see the module doc."""
    counts = _thread_counts(threads)
    total_threads = torch.get_num_threads()
    version, git = _cli.package_version(), _cli.git_revision()
    cpu, tuning = _cli.cpu_model(), _cli.cpu_tuning()
    rows = []
    try:
        for s in sizes:
            for dname in dtypes:
                dtype = getattr(torch, dname)
                tdtype = dtype if table_dtype == "same" else getattr(torch, table_dtype)
                g = torch.Generator().manual_seed(s)
                base = torch.rand(s, heads, dim, generator=g, dtype=torch.float32).to(dtype)
                x_bnsd = base.permute(1, 0, 2).contiguous().unsqueeze(0)  # [1, N, S, D]
                # One buffer serves both layouts, the limits and copy_: BSND is the same memory
                # viewed as [1, S, N, D] (a call's time depends on the bytes it moves, not on their
                # values), so every provider finds x equally warm in cache. With a BSND tensor of
                # its own, read by three calls of a round where BNSD's was read by nine (the limits
                # and copy_ included), bf16 at two threads came out BNSD / BSND 1.39 / 1.69x the
                # limit at 12 MiB and 1.01 / 1.30x at 24 MiB; with the one buffer 1.71-1.80 / 1.30
                # and 0.99-1.02 / 0.97-0.98 (the limit gains most from the smaller working set).
                xs = {"bnsd": x_bnsd, "bsnd": x_bnsd.view(1, s, heads, dim)}
                del base
                sin = torch.rand(s, dim, generator=g).to(tdtype)
                cos = torch.rand(s, dim, generator=g).to(tdtype)
                tab = {"bnsd": (sin, cos), "bsnd": (sin[:, None, :], cos[:, None, :])}
                ys = {m: mode_matrix(MODES[m][0], _cli.mode_sections(m, MODES, dim), dtype=dtype) for m in modes}
                x_bytes = xs["bnsd"].numel() * xs["bnsd"].element_size()
                for nthreads in counts:
                    torch.set_num_threads(nthreads)
                    lay0 = layouts[0]
                    fns = {}
                    for lay in layouts:
                        x = xs[lay]
                        sn, cs = tab[lay]
                        for m in modes:
                            fns[f"rope_matrix|{lay}|{m}"] = (
                                lambda x=x, y=ys[m], sn=sn, cs=cs: _ops.rope_matrix(x, y, sn, cs))
                    if qk:
                        q = xs[lay0]
                        k = q.clone()
                        sn, cs = tab[lay0]
                        y = ys[modes[0]]
                        fns[f"rope_matrix_qk|{lay0}|{modes[0]}"] = (
                            lambda q=q, k=k, y=y, sn=sn, cs=cs: _ops.rope_matrix_qk(q, k, y, sn, cs))
                    # Both stores of each limit run in the round robin, under the same conditions
                    # as the providers; the faster (by median) is the cell's limit.
                    lims = limit_variants(xs[lay0], (sin, cos), k if qk else None)
                    for name, stores in lims.items():
                        for store, fn in stores.items():
                            fns[f"{name}|{store}|"] = fn
                    if copy:
                        out = torch.empty_like(xs[lay0])
                        fns["copy_||"] = lambda out=out, x=xs[lay0]: out.copy_(x)
                    res = _time_round_robin(fns, warmup, iters, min_time)
                    lim_store, nt_ms = {}, {}
                    for name, stores in lims.items():
                        lim_store[name] = min(stores, key=lambda st, name=name: res[f"{name}|{st}|"][0])
                        timed = {st: res.pop(f"{name}|{st}|") for st in stores}
                        res[f"{name}||"] = timed[lim_store[name]]
                        nt_ms[name] = timed["nontemporal"][0]
                    limit_ms = {name: res[f"{name}||"][0] for name in lims}
                    limit_min = {name: res[f"{name}||"][3] for name in lims}
                    copy_ms = res["copy_||"][0] if copy else None
                    for key, (med, p20, p80, low) in res.items():
                        prov, lay, m = key.split("|")
                        lim = limit_ms[limit_of(prov)]
                        moved = moved_bytes(prov, xs["bnsd"], (sin, cos))  # q + k for limit_qk too
                        rows.append({
                            "S": s, "x_bytes": x_bytes, "dtype": dname,
                            "table_dtype": str(tdtype).replace("torch.", ""), "layout": lay, "mode": m,
                            "threads": nthreads, "provider": prov,
                            "store": lim_store.get(prov, ""),
                            "median_ms": _sig(med), "p20_ms": _sig(p20), "p80_ms": _sig(p80),
                            "min_ms": _sig(low), "gbps": _sig(moved / med / 1e6), "x_limit": _sig(med / lim, 3),
                            "x_limit_min": _sig(low / limit_min[limit_of(prov)], 3),
                            "x_limit_nt": _sig(med / nt_ms[limit_of(prov)], 3),
                            "x_copy": _sig(med / copy_ms, 3) if copy_ms else "",
                            "torch": torch.__version__, "heads": heads, "dim": dim,
                            "version": version, "git": git, "cpu": cpu, "cpu_tuning": tuning,
                        })
                    if progress:
                        worst = max(r["x_limit"] for r in rows[-len(res):] if r["provider"] == "rope_matrix")
                        progress(f"S={s:<6} {dname:<9} threads={nthreads}: limit {limit_ms['limit']:.3f} ms "
                                 f"({lim_store['limit']}), rope_matrix worst {worst:.2f}x limit")
                del xs, fns
    finally:
        torch.set_num_threads(total_threads)
    return rows


# The ratio columns of a sweep CSV: what each divides by what.
_STATS = {
    "x_limit": "time ÷ limit, medians",
    "x_limit_min": "time ÷ limit, minimums",
    # The limit as first defined, a copy with streaming stores alone: slower than ordinary stores
    # while the output fits in cache, so a weaker bar there than x_limit's.
    "x_limit_nt": "time ÷ the streaming-store copy alone, medians",
}


def _sig(value, digits=4):
    return float(f"{value:.{digits}g}")


def write_csv(rows: Sequence[dict], path: str) -> None:
    """Writes ``rows`` (dicts with the same keys) to the CSV file ``path``, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def read_csv(path: str) -> list[dict]:
    """The rows of a CSV file written by :func:`write_csv` (values as strings); a ValueError naming
    the line of a row cut short (see ``_cli.read_csv_rows``)."""
    return _cli.read_csv_rows(path)


def summary(rows: Sequence[dict], stat: str = "x_limit", threads: int | None = None) -> str:
    """A markdown table: rope_matrix ÷ limit per size (rows) and dtype × layout (columns), the
    worst mode of each cell, at ``threads`` (default: the largest thread count in ``rows``); then
    the qk and copy_ ratios. ``stat``: a ratio column of the CSV, "x_limit" (ratio of medians),
    "x_limit_min" (of minimums) or "x_limit_nt" (÷ the streaming-store copy alone)."""
    nt = threads or max(int(r["threads"]) for r in rows)
    rows = [r for r in rows if int(r["threads"]) == nt]
    cols = sorted({(r["dtype"], r["layout"]) for r in rows if r["provider"] == "rope_matrix"})
    sizes = sorted({int(r["S"]) for r in rows})
    head = "| S | x MiB (bf16) | " + " | ".join(f"{d} {lay.upper()}" for d, lay in cols)
    head += " | qk | copy_ |"
    lines = [head, "|" + "---|" * (len(cols) + 4)]
    for s in sizes:
        cell = []
        for d, lay in cols:
            v = [float(r[stat]) for r in rows if int(r["S"]) == s and r["dtype"] == d
                 and r["layout"] == lay and r["provider"] == "rope_matrix"]
            cell.append(f"{max(v):.2f}" if v else "")
        for prov in ("rope_matrix_qk", "copy_"):
            v = [float(r[stat]) for r in rows if int(r["S"]) == s and r["provider"] == prov]
            cell.append(f"{min(v):.2f}–{max(v):.2f}" if v else "")
        hd = next(int(r["heads"]) * int(r["dim"]) for r in rows if int(r["S"]) == s)
        lines.append(f"| {s} | {s * hd * 2 / 2**20:.1f} | " + " | ".join(cell) + " |")
    return f"threads = {nt}; worst of the modes in each cell ({_STATS[stat]})\n" + "\n".join(lines)


def _worst(rows, stat, s, d, lay, nt):
    v = [float(r[stat]) for r in rows if int(r["S"]) == s and r["dtype"] == d and r["layout"] == lay
         and r["provider"] == "rope_matrix" and int(r["threads"]) == nt and r.get(stat) not in (None, "")]
    return max(v) if v else None


def _has(rows: Sequence[dict], stat: str, nt: int) -> bool:
    """Whether a run has rows at ``nt`` threads with a value of the column ``stat``."""
    return any(int(r["threads"]) == nt and r.get(stat) not in (None, "") for r in rows)


def spread_table(
    runs: Sequence[Sequence[dict]], stat: str = "x_limit", threads: int | None = None
) -> str:
    """Like ``summary`` over several runs (lists of rows, e.g. read back from their CSVs): each cell
    is "median of the runs (min–max)" of the worst mode's ratio, so the spread between repeated
    runs is visible. Only the runs with rows at that thread count and a ``stat`` column take part
    (the header counts those)."""
    nt = threads or max(int(r["threads"]) for rows in runs for r in rows)
    runs = [rows for rows in runs if _has(rows, stat, nt)]
    all_rows = [r for rows in runs for r in rows]
    cols = sorted({(r["dtype"], r["layout"]) for r in all_rows if r["provider"] == "rope_matrix"})
    sizes = sorted({int(r["S"]) for r in all_rows})
    lines = ["| S | " + " | ".join(f"{d} {lay.upper()}" for d, lay in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for s in sizes:
        cell = []
        for d, lay in cols:
            v = sorted(w for w in (_worst(rows, stat, s, d, lay, nt) for rows in runs) if w is not None)
            cell.append(f"{statistics.median(v):.2f} ({v[0]:.2f}–{v[-1]:.2f})" if v else "")
        lines.append(f"| {s} | " + " | ".join(cell) + " |")
    return (f"threads = {nt}, {len(runs)} run{'s' * (len(runs) != 1)}; worst mode per cell, {_STATS[stat]}: median of the "
            f"runs (min–max)\n" + "\n".join(lines))


def plot(rows: Sequence[dict], path: str, stat: str = "x_limit") -> bool:
    """Ratio ÷ limit against x's size: a panel per dtype (columns) and thread count (rows), a line
    per provider × layout × mode. ``rows`` may hold several runs (concatenated): each point is then
    their median with a bar from the smallest to the largest. Log scale: 1.0 is the limit. False
    when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig = _draw(rows, stat)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _draw(rows: Sequence[dict], stat: str = "x_limit"):
    """The matplotlib Figure of ``plot`` (needs matplotlib). Every panel spans the sizes of all of
    them, a factor of 1.5 beyond the smallest and the largest (one size is no degenerate range);
    the legend below the panels, in as many columns as fit the figure's width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    dtypes = sorted({r["dtype"] for r in rows})
    threads = sorted({int(r["threads"]) for r in rows})
    keys = sorted({(r["provider"], r["layout"], r["mode"]) for r in rows if not r["provider"].startswith("limit")})
    mib = [int(r["x_bytes"]) / 2**20 for r in rows]
    fig, axes = plt.subplots(len(threads), len(dtypes), figsize=(4.6 * len(dtypes), 3.4 * len(threads)),
                             squeeze=False, sharey=True)
    legend = {}  # label: handle, from whichever panel has the line
    for ti, nt in enumerate(threads):
        for di, d in enumerate(dtypes):
            ax = axes[ti][di]
            for i, (prov, lay, m) in enumerate(keys):
                pts = {}
                for r in rows:
                    if (r["dtype"] == d and int(r["threads"]) == nt and r["provider"] == prov
                            and r["layout"] == lay and r["mode"] == m):
                        pts.setdefault(int(r["x_bytes"]), []).append(float(r[stat]))
                if not pts:
                    continue
                xs = sorted(pts)
                med = [statistics.median(pts[x]) for x in xs]
                lo = [med[j] - min(pts[x]) for j, x in enumerate(xs)]
                hi = [max(pts[x]) - med[j] for j, x in enumerate(xs)]
                label = " ".join(v for v in (prov, lay.upper(), m) if v)
                style = "--" if prov in ("copy_", "rope_matrix_qk") else "-"
                line = ax.errorbar([x / 2**20 for x in xs], med, yerr=[lo, hi], linestyle=style, marker="o",
                                   markersize=3, capsize=2, linewidth=1, color=f"C{i % 10}", label=label)
                legend.setdefault(label, line)
            ax.axhline(1.0, color="k", linewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlim(min(mib) / 1.5, max(mib) * 1.5)
            ax.set_yscale("log")
            ax.set_ylim(0.4, 10)
            ax.set_yticks([0.5, 0.75, 1, 1.5, 2, 3, 5, 10], ["0.5", "0.75", "1", "1.5", "2", "3", "5", "10"])
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_title(f"{d}, {nt} thread{'s' if nt > 1 else ''}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if ti == len(threads) - 1:
                ax.set_xlabel("x size (MiB)")
        axes[ti][0].set_ylabel("time ÷ limit")
    # The legend in as many columns (up to 5) as fit the figure's width; the figure grows by its
    # height, so the panels keep theirs.
    renderer = fig.canvas.get_renderer()
    width = fig.get_figwidth() * fig.dpi
    below = 0.0  # inches under the panels
    for ncol in range(min(5, len(legend)), 0, -1):
        leg = fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=ncol, fontsize=7)
        box = leg.get_window_extent(renderer)
        if box.width <= 0.98 * width or ncol == 1:
            below = (box.height + 8) / fig.dpi  # with a margin
            break
        leg.remove()
    panels = fig.get_figheight()
    fig.set_figheight(panels + below)
    fig.tight_layout(rect=(0, below / (panels + below), 1, 1))
    return fig


# The columns --summarize reads (spread_table, plot), and the type each value must have.
_SWEEP_COLUMNS = {"S": int, "x_bytes": int, "threads": int, "x_limit": float, "dtype": None, "layout": None,
                  "mode": None, "provider": None}


def _read_sweep_csv(path: str) -> list[dict]:
    """read_csv for ``--summarize``: the rows of a sweep CSV, or an OSError or a ValueError that
    names the file and says what is wrong with it."""
    try:
        rows = read_csv(path)
    except OSError as e:
        raise OSError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path} is not a CSV file ({e})") from None
    except ValueError as e:  # a row cut short
        raise ValueError(f"{e}; expected the CSV written by python -m npu_ops_transformer_ext.sweep") from None
    what = "expected the CSV written by python -m npu_ops_transformer_ext.sweep"
    if not rows:
        raise ValueError(f"{path} has no rows; {what}")
    missing = [c for c in _SWEEP_COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(f"{path} has no column {', '.join(missing)}; {what}")
    columns = {**_SWEEP_COLUMNS, **{c: float for c in _STATS if c in rows[0]}}
    for i, r in enumerate(rows, 2):
        for c, kind in columns.items():
            if kind is None:
                continue
            kind_name = "a positive integer" if kind is int else "a positive finite number"
            try:
                v = kind(r[c])
            except (TypeError, ValueError):
                raise ValueError(f"{path} line {i}: {c} = {r[c]!r} is not {kind_name}; {what}") from None
            if not (math.isfinite(v) and v > 0):  # sizes, thread counts and ratios of times
                raise ValueError(f"{path} line {i}: {c} = {r[c]!r} is not {kind_name}; {what}")
    return rows


def _csv_list(v):
    """The entries of a comma list (or list), each once, in order: a repeated value would time the
    same cells twice."""
    return list(dict.fromkeys(s for s in (v.split(",") if isinstance(v, str) else v) if s != ""))


def main(argv: Sequence[str] | None = None) -> list[dict] | list[list[dict]]:
    """The command line (``python -m npu_ops_transformer_ext.sweep --help``); returns the rows (with
    ``--summarize``, the rows of each CSV)."""
    from . import _cli

    ap = argparse.ArgumentParser(
        prog="python -m npu_ops_transformer_ext.sweep",
        allow_abbrev=False,  # options by their whole names only (as bench, whose hand-offs need it)
        description=__doc__.split("\n")[0],
        formatter_class=_cli.HelpFormatter,
    )
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma list of S")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma list of {DTYPES}")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma list of {LAYOUTS}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {list(MODES)}")
    ap.add_argument("--threads", default="1,2,all",
                    help=f"comma list of thread counts >= 1, 'all' = torch's default ({torch.get_num_threads()} "
                    "here); counts above it are left out, with a note")
    ap.add_argument("--heads", type=int, default=24, help="B*N")
    ap.add_argument("--dim", type=int, default=128, help="D (the 3d mode needs 128, half and interleave an even D)")
    ap.add_argument("--table-dtype", default="same", choices=["same", "float32"],
                    help="dtype of sin/cos: x's own or float32")
    ap.add_argument("--no-qk", action="store_true", help="skip rope_matrix_qk")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds per cell")
    ap.add_argument("--iters", type=int, default=10, help="rounds per cell, at least")
    ap.add_argument("--min-time", type=float, default=0.3,
                    help="seconds of rounds per cell, at least (more rounds for small sizes; at most 5000 "
                         "rounds for it, so a cell of very fast calls may last less)")
    ap.add_argument("--csv", default="bench_results/sweep.csv", help="CSV file to write")
    ap.add_argument("--plot", default="bench_results/sweep.png",
                    help="image to write (the format follows the extension: png, svg, pdf, ...); '' for none")
    ap.add_argument("--quiet", action="store_true", help="no per-cell lines")
    ap.add_argument("--summarize", nargs="+", metavar="CSV",
                    help="do not run: print the spread over these CSVs of earlier runs and plot them together (with "
                    "--plot as the only other option)")
    a = ap.parse_args(argv)
    # The output paths are checked (their folders created) once every other option has passed,
    # before anything runs: the plot is written last.
    if a.summarize:
        # it runs nothing: an option of a run would be ignored silently (and not even checked)
        ignored = [f"--{k.replace('_', '-')}" for k in vars(a) if k not in ("summarize", "plot")
                   and getattr(a, k) != ap.get_default(k)]
        if ignored:
            ap.error(f"--summarize runs nothing, so {', '.join(ignored)} would be ignored; with it give "
                     "only --plot")
        runs = []
        for path in a.summarize:
            try:
                runs.append(_read_sweep_csv(path))
            except (OSError, ValueError) as e:
                ap.error(f"--summarize: {e}")
        if a.plot:
            _cli.check_output_path(ap, "--plot", a.plot, image=True)
        # every thread count of any run; a statistic over the runs that have it (older CSVs have
        # no x_limit_min or x_limit_nt), saying which runs are left out
        for nt in sorted({int(r["threads"]) for rows in runs for r in rows}):
            at_nt = [path for path, rows in zip(a.summarize, runs) if any(int(r["threads"]) == nt for r in rows)]
            for stat, what in _STATS.items():
                have = [path for path, rows in zip(a.summarize, runs) if _has(rows, stat, nt)]
                if not have:
                    continue
                missing = [path for path in at_nt if path not in have]
                if missing:
                    print(f"threads = {nt}, {what}: leaving out {', '.join(missing)} (no {stat} column)")
                print(spread_table(runs, stat, nt) + "\n")
        if a.plot:
            merged = [r for rows in runs for r in rows]
            print(f"wrote {a.plot}" if plot(merged, a.plot) else "no plot (matplotlib is not installed)")
        return runs
    try:
        sizes = _csv_list([int(v) for v in _csv_list(a.sizes)])
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        ap.error(f"--sizes takes a comma list of positive integers S, got {a.sizes!r}")
    dtypes, layouts, modes = _csv_list(a.dtypes), _csv_list(a.layouts), _csv_list(a.modes)
    for v, allowed, what in ((dtypes, DTYPES, "dtype"), (layouts, LAYOUTS, "layout"), (modes, list(MODES), "mode")):
        bad = [x for x in v if x not in allowed]
        if bad or not v:
            ap.error(f"--{what}s: choose from {allowed}, got {v}")
    if a.heads < 1:
        ap.error(f"--heads must be >= 1, got {a.heads}")
    if a.dim < 1:
        ap.error(f"--dim must be >= 1, got {a.dim}")
    widest = max(getattr(torch, t).itemsize for t in dtypes)
    problem = _cli.memory_problem(f"--sizes {max(sizes)}", 2 * max(sizes) * a.heads * a.dim * widest,
                                  f"x of --heads {a.heads} x --dim {a.dim} and its output in {widest}-byte elements")
    if problem:
        ap.error(problem)
    fit = [m for m in MODES if not _cli.mode_problem(m, MODES, a.dim)]
    for m in modes:
        problem = _cli.mode_problem(m, MODES, a.dim)
        if problem:
            ap.error(f"--modes {m} {problem}, got --dim {a.dim}; "
                     + (f"at this D choose from {', '.join(fit)}" if fit else "use an even --dim"))
    if a.iters < 1 or a.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    if not a.min_time >= 0 or a.min_time == float("inf"):
        ap.error(f"--min-time must be a finite number of seconds >= 0, got {a.min_time}")
    try:
        counts, above = _thread_spec(a.threads)
    except ValueError as e:
        ap.error(str(e))
    if not counts:
        ap.error(f"--threads: no count up to this process's {torch.get_num_threads()} threads in {a.threads!r}")
    _cli.check_output_paths(ap, ([("--plot", a.plot, True)] if a.plot else []) + [("--csv", a.csv, False)])
    if above:
        print(f"note: --threads {', '.join(map(str, above))} left out: above this process's "
              f"{torch.get_num_threads()} threads", file=sys.stderr)
    rows = run_sweep(sizes, dtypes, layouts, modes, ",".join(map(str, counts)), a.heads, a.dim, a.table_dtype,
                     qk=not a.no_qk, warmup=a.warmup, iters=a.iters, min_time=a.min_time,
                     progress=None if a.quiet else print)
    write_csv(rows, a.csv)
    for nt in sorted({int(r["threads"]) for r in rows}):
        print(summary(rows, "x_limit", nt) + "\n")
    print(summary(rows, "x_limit_min") + "\n")
    print(summary(rows, "x_limit_nt") + "\n")
    print(f"wrote {a.csv}")
    if a.plot:
        print(f"wrote {a.plot}" if plot(rows, a.plot) else "no plot (matplotlib is not installed)")
    return rows


if __name__ == "__main__":
    main()
