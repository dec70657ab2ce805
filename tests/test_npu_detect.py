"""cmake/npu_detect.cmake finds the bisheng compiler in every CANN layout CANN's own host cmake accepts
and names the one it found; with none it says what it tried. Fake CANN trees, no toolkit needed."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="no cmake on PATH")

PROC = platform.machine().lower()
LAYOUTS = ["tools", "compiler", "ascendc_devkit"] + ([f"{PROC}-linux"] if PROC in ("x86_64", "aarch64") else [])


def _configure(tmp_path: Path, cann: Path | None) -> str:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    shutil.copy(ROOT / "cmake" / "npu_detect.cmake", proj)
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(t NONE)\n"
        "find_package(Python3 COMPONENTS Interpreter)\ninclude(npu_detect.cmake)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_HOME_PATH"}
    if cann is not None:
        env["ASCEND_HOME_PATH"] = str(cann)
    build = tmp_path / "build"
    shutil.rmtree(build, ignore_errors=True)
    r = subprocess.run([CMAKE, "-S", str(proj), "-B", str(build)], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return next(ln for ln in r.stdout.splitlines() if "npu_ops_transformer_ext:" in ln)


def _fake_cann(root: Path, layout: str) -> Path:
    b = root / layout / "ccec_compiler" / "bin"
    b.mkdir(parents=True)
    (b / "bisheng").write_text("")
    return root


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_compiler_layout_is_found_and_named(tmp_path, layout):
    line = _configure(tmp_path, _fake_cann(tmp_path / "cann", layout))
    # Found: the build then needs torch_npu (absent here) and names the layout either way.
    assert f"{layout}/ccec_compiler" in line and "has no bisheng" not in line, line


def test_other_arch_layout_is_not_taken(tmp_path):
    other = "aarch64-linux" if PROC == "x86_64" else "x86_64-linux"
    line = _configure(tmp_path, _fake_cann(tmp_path / "cann", other))
    assert "has no bisheng" in line and "compiler/ccec_compiler/bin/bisheng" in line, line


def test_no_cann_says_how_to_point_at_it(tmp_path):
    assert "ASCEND_HOME_PATH" in _configure(tmp_path, None)
