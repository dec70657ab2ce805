"""Builds the wheel by driving CMake (CMakeLists.txt is the single build truth).

    python -m build --wheel -n      # -n: build against the torch already installed
    pip install dist/*.whl

Environment:
    NPU_OPS_BUILD_TYPE   CMake build type (default Release)
    NPU_OPS_JOBS         parallel compile jobs (default: number of CPUs)

The wheel requires the torch release it was built against (``torch_requirement``): the extension
is compiled against that torch's C++ ABI, which changes between releases.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent


def torch_requirement(version: str) -> str:
    """The wheel's torch requirement for a build against torch ``version``: that exact release,
    without the local suffix (``2.13.0+cpu`` -> ``torch==2.13.0``), which any local build of that
    release (CPU, CUDA, or the one torch_npu needs) satisfies."""
    release = version.split("+", 1)[0]
    if not release or not release[0].isdigit():
        raise ValueError(f"cannot read a torch release from torch.__version__ = {version!r}")
    return f"torch=={release}"


def _build_torch_version() -> str:
    import torch

    return str(torch.__version__)


REVISION_FILE = "GIT_REVISION"  # written into the sdist: the revision it was made from


def _git_revision() -> str:
    """Short hash of the source tree's HEAD (``+dirty`` with changes to tracked files) when the
    tree is a git checkout of its own (not a folder inside another repository), else the revision
    an sdist recorded, else ""."""
    try:
        run = lambda *a: subprocess.run(
            ["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
        top = run("rev-parse", "--show-toplevel")
        if top and Path(top).resolve() == ROOT:
            sha = run("rev-parse", "--short", "HEAD")
            if sha and run("status", "--porcelain", "--untracked-files=no"):
                sha += "+dirty"
            return sha
    except (OSError, subprocess.SubprocessError):
        pass
    recorded = ROOT / REVISION_FILE
    return recorded.read_text().strip() if recorded.is_file() else ""


class BuildPy(build_py):
    """Also records the git revision in the built package (``_build_info.GIT_REVISION``), which the
    benchmark CSV reports when the installed package is not inside a git checkout."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "npu_ops_transformer_ext" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f'GIT_REVISION = "{_git_revision()}"\n')


class Sdist(sdist):
    """Also writes the git revision into the sdist (``GIT_REVISION``), for the wheels built from it."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        (Path(base_dir) / REVISION_FILE).write_text(_git_revision() + "\n")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # The package directory inside the build tree: CMake writes every module there.
        package_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        package_dir.mkdir(parents=True, exist_ok=True)
        build_dir = Path(self.build_temp).resolve() / "cmake"
        # A build tree configured by another interpreter or torch keeps that torch in its CMake
        # cache: start afresh, so the extension is compiled against the torch it will require.
        import torch

        stamp, env = build_dir / "npu_ops_build_env.txt", f"{sys.executable}\n{torch.__file__}\n{torch.__version__}\n"
        if build_dir.exists() and (not stamp.is_file() or stamp.read_text() != env):
            shutil.rmtree(build_dir)
        build_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(env)
        build_type = os.environ.get("NPU_OPS_BUILD_TYPE", "Release")
        jobs = os.environ.get("NPU_OPS_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(
            [
                "cmake",
                str(ROOT),
                f"-DCMAKE_BUILD_TYPE={build_type}",
                f"-DPython3_EXECUTABLE={sys.executable}",
                f"-DNPU_OPS_PACKAGE_DIR={package_dir}",
            ],
            cwd=build_dir,
        )
        subprocess.check_call(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)

    def copy_extensions_to_source(self):
        # --inplace: setuptools copies the declared extension (_C) into the source tree; CMake
        # built the twin module next to it, so copy that too.
        super().copy_extensions_to_source()
        built = Path(self.build_lib).resolve() / "npu_ops_transformer_ext"
        for module in built.glob("_twin*"):
            self.copy_file(str(module), str(ROOT / "python" / "npu_ops_transformer_ext" / module.name))


setup(
    install_requires=[torch_requirement(_build_torch_version())],
    ext_modules=[CMakeExtension("npu_ops_transformer_ext._C")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy, "sdist": Sdist},
)
