"""Shared pieces of the command-line tools (bench, precision, plot): help layout, argument parsing,
progress bars, package version and git revision."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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


def parse_modes(ap: argparse.ArgumentParser, text: str, known: Any) -> list[str]:
    """``--modes a,b``: a comma list of names from ``known``, or ``ap.error`` naming the bad one."""
    modes = [m for m in text.split(",") if m]
    for m in modes:
        if m not in known:
            ap.error(f"unknown mode {m!r}; choose from {', '.join(known)}")
    return modes


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


def package_version() -> str:
    """The package's version string."""
    from . import __version__

    return __version__


def git_revision() -> str:
    """The git revision the package comes from: the source tree's ``HEAD`` (short hash,
    ``+dirty`` with uncommitted changes to tracked files), else the revision recorded when the
    wheel was built, else ``unknown``."""
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
        # only our own checkout: an installed package may sit inside someone else's repository
        if sha and top and os.path.exists(os.path.join(top, "python", "npu_ops_transformer_ext")):
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
