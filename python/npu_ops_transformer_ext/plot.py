"""Draws the CSV written by ``python -m npu_ops_transformer_ext.bench``: one bar group per mode,
one bar per provider, time relative to the ``copy_`` floor (``clone`` or absolute times when the
CSV has no ``copy_``; log scale; lower is better). The legend
sits to the right of the plot, outside the data. Needs matplotlib (``pip install matplotlib``).

    python -m npu_ops_transformer_ext.plot bench_results/rope_matrix_cpu.csv [-o bench.png]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from . import _cli

__all__ = ["ORDER", "draw", "main", "read_csv"]

#: Bar order (fastest expected first); providers missing from the CSV are left out.
ORDER = ["rope_matrix", "rope_matrix_nocache", "compile_v1", "eager_v3", "eager_v1", "clone", "copy_"]

_NO_MATPLOTLIB = (
    "matplotlib is not installed; install it with `pip install matplotlib` "
    "(or the package's extra: `pip install npu_ops_transformer_ext[plot]`)"
)


def read_csv(path: str) -> tuple[dict[str, dict[str, float]], dict[str, str], str]:
    """``({mode: {provider: value}}, metadata of the last row, y label)`` from a bench CSV. The
    value is the time relative to ``copy_``; without ``copy_`` in the CSV, relative to ``clone``;
    without either, the median time in ms. An OSError when the file cannot be read; a ValueError
    (or ``csv.Error``) saying what is wrong when it is not such a CSV."""
    what = "expected the CSV of python -m npu_ops_transformer_ext.bench"
    try:
        rows = _cli.read_csv_rows(path)
    except ValueError as e:
        if isinstance(e, UnicodeDecodeError):
            raise
        raise ValueError(f"{e} ({what})") from None
    if not rows:
        raise ValueError(f"{path}: no rows ({what})")
    missing = [c for c in ("op", "mode", "provider", "median_ms") if c not in rows[0]]
    if missing:
        hint = ("; a sweep CSV is drawn by python -m npu_ops_transformer_ext.sweep --summarize"
                if "x_bytes" in rows[0] else "")
        raise ValueError(f"{path}: no column {', '.join(missing)} ({what}){hint}")
    for column, label in (
        ("x_copy", "time / copy_ (lower is better)"),
        ("x_clone", "time / clone (lower is better)"),
        ("median_ms", "median time, ms (lower is better)"),
    ):
        if any(r.get(column) for r in rows):
            break
    data: dict[str, dict[str, float]] = defaultdict(dict)
    for i, r in enumerate(rows, 2):
        try:
            v = float(r.get(column) or "nan")  # an empty cell: no bar
        except ValueError:
            raise ValueError(f"{path} line {i}: {column} = {r[column]!r} is not a number ({what})") from None
        if r.get(column) and not (math.isfinite(v) and v > 0):
            # a time or a ratio of times: a log axis cannot draw it, and no measurement gives it
            raise ValueError(f"{path} line {i}: {column} = {r[column]!r} is not a positive finite number ({what})")
        data[r["mode"]][r["provider"]] = v
    return dict(data), rows[-1], label


def draw(path: str) -> Any:
    """The matplotlib Figure for the bench CSV at ``path`` (raises ImportError without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, meta, ylabel = read_csv(path)
    modes = list(data)
    providers = [p for p in ORDER if any(p in data[m] for m in modes)]
    providers += sorted({p for m in modes for p in data[m]} - set(providers))
    width = 0.8 / max(1, len(providers))
    fig, ax = plt.subplots(figsize=(10, 4))
    for i, p in enumerate(providers):
        heights = [data[mo].get(p, math.nan) for mo in modes]
        ax.bar([m + i * width for m in range(len(modes))], heights, width, label=p)
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(modes))], modes)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    version = meta.get("version")
    ax.set_title(
        f"rope_matrix, x {meta.get('shape')} {meta.get('dtype')}, {meta.get('cpu')}, "
        f"{meta.get('threads')} threads"
        + (f", v{version} git {meta.get('git')}" if version else ""),
        fontsize=9,
    )
    # outside the axes, to the right: never on top of a bar
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m npu_ops_transformer_ext.plot --help``. Returns the exit status
    (2 when matplotlib is missing; a CSV that is missing or not a bench CSV, or an ``--out`` that
    is a directory, has a format matplotlib does not write or a folder that cannot be created,
    exits with 2 through ``argparse``'s ``error``)."""
    ap = argparse.ArgumentParser(
        prog="python -m npu_ops_transformer_ext.plot",
        allow_abbrev=False,  # options by their whole names only (as bench, whose hand-offs need it)
        description=__doc__,
        formatter_class=_cli.HelpFormatter,
    )
    ap.add_argument("csv", help="CSV written by python -m npu_ops_transformer_ext.bench")
    ap.add_argument("-o", "--out", default="bench_results/rope_matrix_cpu.png",
                    help="image to write (the format follows the extension: png, svg, pdf)")
    a = ap.parse_args(argv)
    try:
        read_csv(a.csv)  # a missing or unreadable file, or not a bench CSV: an option error (exit 2)
    except OSError as e:
        ap.error(f"cannot read {a.csv}: {e.strerror or e}")
    except (UnicodeDecodeError, csv.Error) as e:
        ap.error(f"{a.csv} is not a CSV file ({e})")
    except ValueError as e:
        ap.error(str(e))
    _cli.check_output_path(ap, "--out", a.out, image=True)  # (creates its folder) before drawing anything
    try:
        fig = draw(a.csv)
    except ImportError as e:
        if "matplotlib" not in str(e):
            raise
        print(f"error: {_NO_MATPLOTLIB}", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.savefig(a.out, dpi=120, bbox_inches="tight")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
