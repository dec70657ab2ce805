"""Shared pieces of the command-line tools (bench, sweep, precision, plot): help layout, argument
parsing, progress bars, the shuffled round-robin timer, package version, git revision and the CPU."""

from __future__ import annotations

import argparse
import csv
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

PROGRESS_CHOICES = ("auto", "on", "off")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every option's default (unless its help already says it) and keeps the
    description's line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default:" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


def parse_shape(ap: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    """``--shape B,N,S,D``: four positive integers, or ``ap.error`` naming what was given."""
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        ap.error(f"--shape takes four positive integers B,N,S,D, got {text!r}")
    return shape


def memory_problem(option: str, nbytes: int, what: str) -> str:
    """Why a run that holds ``nbytes`` at once (``what``: which tensors) cannot fit this machine's
    physical memory, as an option error naming ``option``, or ``""`` when it fits (or the memory
    size is unknown). A lower bound: the run needs more, so only sizes that cannot run are refused."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return ""
    if total <= 0 or nbytes <= total:
        return ""
    gib = 1 << 30
    return (f"{option} needs at least {nbytes / gib:.1f} GiB ({what}), more than this machine's "
            f"{total / gib:.1f} GiB of memory")


def parse_modes(ap: argparse.ArgumentParser, text: str, known: Any) -> list[str]:
    """``--modes a,b``: a comma list of names from ``known`` (each once, in order), or ``ap.error``
    naming the bad one."""
    modes = list(dict.fromkeys(m for m in text.split(",") if m))
    for m in modes:
        if m not in known:
            ap.error(f"unknown mode {m!r}; choose from {', '.join(known)}")
    return modes


def mode_problem(name: str, modes: Any, d: int) -> str | None:
    """Why mode ``name`` of a CLI's ``modes`` table cannot be built for head dim ``d`` (e.g. "needs
    an even D ..."), or None when it can. ``modes``: ``{name: (rotation, sections)}``, rotation
    ``"half"``, ``"interleave"`` or None (a dense matrix, any D), sections a fixed split such as
    ``[44, 44, 40]`` (that D only) or None (one section of the whole D)."""
    rot, sections = modes[name]
    if sections is not None:
        total = sum(sections)
        return None if d == total else f"needs D = {total} (its split is {'+'.join(map(str, sections))})"
    if rot is not None and d % 2:
        return "needs an even D (its rotation turns pairs of elements)"
    return None


def mode_sections(name: str, modes: Any, d: int) -> list[int]:
    """The sections of mode ``name`` of ``modes`` (see ``mode_problem``) for head dim ``d``: its
    fixed split, or ``[d]``; a ValueError saying which D the mode needs when it has none for ``d``."""
    problem = mode_problem(name, modes, d)
    if problem:
        raise ValueError(f"mode {name} {problem}, got D = {d}")
    sections = modes[name][1]
    return [d] if sections is None else list(sections)


#: The formats matplotlib's ``savefig`` writes out of the box (its canvas's ``get_supported_filetypes``,
#: less ``NEEDS_PROGRAM``), for checking an image path when matplotlib is not installed.
IMAGE_FORMATS = ("eps", "jpeg", "jpg", "pdf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff", "webp")
#: Formats matplotlib lists that need an external program: pgf runs LaTeX (xelatex by default).
NEEDS_PROGRAM = ("pgf",)


def image_formats() -> list[str]:
    """The file formats ``savefig`` can write without an external program: asked of matplotlib's
    canvas when it is installed (less ``NEEDS_PROGRAM``), else ``IMAGE_FORMATS``."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return list(IMAGE_FORMATS)
    return sorted(set(FigureCanvasBase.get_supported_filetypes()) - set(NEEDS_PROGRAM))


def check_output_path(ap: argparse.ArgumentParser, option: str, path: str, image: bool = False) -> None:
    """``ap.error`` naming ``option`` unless ``path`` can be written (output_path_problem), checked
    before a run."""
    check_output_paths(ap, [(option, path, image)])


def check_output_paths(ap: argparse.ArgumentParser, outputs: Sequence[tuple[str, str, bool]]) -> None:
    """check_output_path for each ``(option, path, image)``, all of them before any folder is
    created: a refused command leaves nothing behind."""
    for create in (False, True):
        for option, path, image in outputs:
            problem = output_path_problem(path, image, create=create)
            if problem:
                ap.error(f"{option}{problem}")


def output_path_problem(path: str, image: bool = False, create: bool = True) -> str:
    """Why ``path`` cannot be written, as text that follows the option's name (``""`` when it can):
    it is a file name (not an existing directory, not ending in a path separator), its folder exists
    or can be created (the nearest existing ancestor is a writable directory, and the folder is
    created here, before the run, unless ``create`` is false), and the file can be created there
    (opened for appending, and removed again when it did not exist before; not tried when the
    folder is still to be created). ``image``: it must also end in an extension that names a format
    of ``image_formats`` (the format ``savefig`` writes; a name without one would be written as
    ``name.png``)."""
    if not path:
        return ": give a file name"
    if "\0" in path:
        return f" {path!r}: a file name cannot hold a NUL character"
    if path.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        return f" {path} ends with a path separator; give a file name"
    if os.path.isdir(path):
        return f" {path} is a directory; give a file name"
    if image:
        ext = os.path.splitext(path)[1][1:].lower()
        formats = image_formats()
        if not ext:
            return (f" {path} has no extension to name its image format; end the name with one of "
                    f".{', .'.join(formats)}")
        if ext not in formats:
            why = "needs LaTeX" if ext in NEEDS_PROGRAM else "is not an image format matplotlib writes"
            return f" {path}: {ext!r} {why}; end the name with one of .{', .'.join(formats)}"
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f" {path}: cannot create its folder {folder}: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "write into" if existing == folder else "create its folder in"
        return f" {path}: cannot {verb} {existing} (no write permission)"
    if not create and not os.path.isdir(folder):
        return ""
    try:  # what the permission bits do not tell (read-only or virtual file systems, ...)
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        return f" {path}: cannot create its folder {folder}: {e.strerror or e}"
    target = os.path.realpath(path)  # what open() creates: a dangling symlink's target
    existed = os.path.exists(target)
    try:  # nor whether this folder takes the file (/proc, root's files on a read-only mount, ...)
        with open(path, "a"):
            pass
    except OSError as e:
        return f" {path}: cannot write it: {e.strerror or e}"
    if not existed:
        try:
            os.remove(target)
        except OSError:
            pass
    return ""


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo where there is one), for benchmark records."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_tuning() -> str:
    """The per-CPU tuning the CPU kernel runs with (``_cpu_tuning``), for benchmark records."""
    import torch

    return torch.ops.npu_ops_transformer_ext._cpu_tuning(torch.empty(0))


def read_csv_rows(path: str) -> list[dict]:
    """The rows of the CSV file ``path`` as dicts keyed by its header (values as strings; blank
    lines skipped, as ``csv.DictReader`` does). A ValueError naming the file and line of a row with
    more or fewer fields than the header (a file cut short mid-row, which ``DictReader`` would read
    with None values)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        rows = []
        for fields in reader:
            if not fields:
                continue
            if len(fields) != len(header):
                raise ValueError(f"{path} line {reader.line_num}: {len(fields)} fields where the header has "
                                 f"{len(header)}")
            rows.append(dict(zip(header, fields)))
    return rows


def add_progress_option(ap: argparse.ArgumentParser) -> None:
    """``--progress {auto,on,off}``: auto shows a bar when stderr is a terminal and tqdm is installed."""
    ap.add_argument(
        "--progress",
        default="auto",
        choices=PROGRESS_CHOICES,
        help="progress bar with an estimate of the time left (needs tqdm; auto: when stderr is a "
        "terminal)",
    )


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, desc: str, mode: str = "auto", unit: str = "call") -> Any:
    """A tqdm bar over ``total`` steps (``update``, ``set_postfix_str``, ``close``), or an object
    with the same methods that shows nothing when ``mode`` is off, tqdm is not installed, or (auto)
    stderr is not a terminal."""
    if mode not in PROGRESS_CHOICES:
        raise ValueError(f"progress mode must be one of {PROGRESS_CHOICES}, got {mode!r}")
    if mode == "off" or (mode == "auto" and not sys.stderr.isatty()):
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)


def time_round_robin(fns: dict, warmup: int, iters: int, min_time: float | None = None, bar: Any = None) -> dict:
    """{name: (median, p20, p80, min) ms} over rounds of one call of each provider, so that a change in
    machine load during the run affects all of them alike and the ratios stay meaningful. Each round
    calls the providers in a new order (fixed seed): a call pays for writing back the dirty lines
    that the call before it left in cache with ordinary stores (tens of MiB after ``copy_``), so no
    provider may always follow the same one. At least ``iters`` rounds; given ``min_time``, one
    untimed round sizes the run and it takes more rounds (up to 5000) until they last that many
    seconds, so that small calls get enough samples for a stable median and minimum on a busy
    machine. ``bar`` (see
    ``progress``) advances once per warmup and timed call."""
    bar = bar or _NoBar()
    for fn in fns.values():
        for _ in range(warmup):
            fn()
            bar.update()
    if min_time is not None:
        t0 = time.perf_counter()
        for fn in fns.values():
            fn()
        per_round = max(time.perf_counter() - t0, 1e-9)
        iters = max(iters, min(5000, int(min_time / per_round)))
    samples: dict = {name: [] for name in fns}
    order = list(fns)
    rng = random.Random(0)
    for _ in range(iters):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            samples[name].append((time.perf_counter() - t0) * 1e3)
            bar.update()
    return {name: (statistics.median(s), quantile(s, 1, 5), quantile(s, 4, 5), min(s))
            for name, s in samples.items()}


def quantile(data: Any, k: int, q: int) -> float:
    """The ``k``-th ``q``-quantile of ``data`` (``quantile(s, 1, 5)``: the 20th percentile), for
    any number of samples >= 1. Method: linear interpolation between the order statistics at the
    1-based rank ``h = (n + 1) * k / q`` (Hyndman & Fan type 6, R's ``quantile(type = 6)``), with
    ranks below 1 or above n clamped to the smallest or largest sample. For n >= q this is exactly
    ``statistics.quantiles(data, n=q)[k - 1]`` (its default ``"exclusive"`` method), which
    extrapolates past the smallest and largest sample for fewer; at ``k / q = 1 / 2`` it is the
    median, and it grows with ``k / q``, so p20 <= median <= p80 for every n."""
    s = sorted(data)
    n = len(s)
    if n == 0 or not 0 <= k <= q:
        raise ValueError(f"quantile: needs at least one sample and 0 <= k <= q, got n = {n}, k = {k}, q = {q}")
    j, delta = divmod(k * (n + 1), q)  # h = j + delta / q, exact in integers
    if j < 1:
        return s[0]
    if j >= n:
        return s[-1]
    return (s[j - 1] * (q - delta) + s[j] * delta) / q


def package_version() -> str:
    """The package's version string."""
    from . import __version__

    return __version__


def git_revision() -> str:
    """The git revision the package comes from: when it is imported from the source tree itself
    (``python/npu_ops_transformer_ext`` of a checkout of this project), that tree's ``HEAD`` (short
    hash, ``+dirty`` with uncommitted changes to tracked files); when it is installed, the revision
    recorded when the wheel was built (even if the environment it is installed in lies inside a
    checkout, whose later commits and edits say nothing about the installed build); else
    ``unknown``."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, cwd=here, timeout=5, check=False,
        ).stdout.strip()
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, cwd=here, timeout=5, check=False,
        ).stdout.strip()
        # only when imported from our own checkout's source folder: an installed package may sit
        # inside a repository (someone else's, or this one's virtual environment)
        src = os.path.join(top, "python", "npu_ops_transformer_ext") if top else ""
        if sha and src and os.path.realpath(src) == os.path.realpath(here):
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, cwd=here, timeout=5, check=False,
            ).stdout.strip()
            return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from ._build_info import GIT_REVISION  # written into the wheel by setup.py

        return GIT_REVISION or "unknown"
    except ImportError:
        return "unknown"
