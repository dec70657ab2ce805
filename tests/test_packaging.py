"""What a user depending on the package gets: the torch pin of a built wheel, LICENSE and py.typed,
the exports, type hints and docstrings."""

import ast
import importlib
import importlib.metadata
import inspect
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import npu_ops_transformer_ext as pkg
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "setup.py"
needs_source = pytest.mark.skipif(not SETUP.exists(), reason="needs the source tree (setup.py)")


def _setup_fn(name, **module_globals):
    """setup.py's function ``name``, without running setup(), with ``module_globals`` as its globals."""
    tree = ast.parse(SETUP.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns = dict(module_globals)
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(SETUP), "exec"), ns)  # noqa: S102  (our own setup.py function, without running setup())
    return ns[name]


def _torch_requirement():
    return _setup_fn("torch_requirement")


def _git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def _tracked_files():
    r = subprocess.run(["git", "ls-files"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    if r.returncode or not r.stdout.strip() or Path(_git("rev-parse", "--show-toplevel", cwd=ROOT)).resolve() != ROOT:
        pytest.skip("needs the project's git checkout")
    return r.stdout.split()


# What building the wheel from the sdist needs, and what the tests need: all of it must be in the sdist.
_SDIST_DIRS = {"cmake", "cpu_kernel", "validation", "twin", "inc", "op_host", "op_kernel", "python", "tests",
               "scripts", "docs"}
_SDIST_TOP = {"CMakeLists.txt", "setup.py", "pyproject.toml", "LICENSE", "README.md", "Makefile", "npu_ops_def.cpp",
              "rope_matrix_autograd.cpp", "rope_matrix_functionalize.cpp", "torch_interface.cpp", "requirements-dev.txt",
              "requirements-optional.txt", "requirements-npu.txt"}


@needs_source
def test_sdist_holds_the_build_and_cmake_configures_from_it(tmp_path):
    tracked = _tracked_files()
    # From a clone with the working tree's files: an egg-info left in the tree by an earlier build
    # lists files that sdist would take even without MANIFEST.in.
    tree = tmp_path / "tree"
    _git("clone", "-q", str(ROOT), str(tree), cwd=tmp_path)
    for f in tracked:
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, tree / f)
    subprocess.run([sys.executable, "-m", "build", "--sdist", "-n", "-o", str(tmp_path / "dist")], cwd=tree,
                   check=True, capture_output=True, timeout=300)
    (tar_path,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "src", filter="data")
    top = names[0].split("/")[0]
    have = {n.split("/", 1)[1] for n in names if "/" in n}
    needed = [f for f in tracked if f in _SDIST_TOP or f.split("/")[0] in _SDIST_DIRS]
    assert [f for f in needed if f not in have] == []
    src = tmp_path / "src" / top
    # the revision it was made from, for the wheels built from it
    want = _git("rev-parse", "--short", "HEAD", cwd=ROOT)
    assert (src / "GIT_REVISION").read_text().strip().split("+")[0] == want
    # CMake configures and generates from the unpacked sdist: every source it compiles is there.
    cmake = shutil.which("cmake", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    r = subprocess.run([cmake, "-S", str(src), "-B", str(tmp_path / "build"), f"-DPython3_EXECUTABLE={sys.executable}",
                        f"-DNPU_OPS_PACKAGE_DIR={tmp_path / 'pkg'}"], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_git_revision_only_of_the_project_own_checkout(tmp_path):
    """A source tree inside another repository (a vendored tarball) does not take that repository's
    revision; it takes the one an sdist recorded, or none."""
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "vendor" / "pkg"
    inner.mkdir(parents=True)
    _git("init", "-q", cwd=outer)
    _git("commit", "-q", "--allow-empty", "-m", "other", cwd=outer)
    rev = _setup_fn("_git_revision", ROOT=inner.resolve(), Path=Path, subprocess=subprocess, REVISION_FILE="GIT_REVISION")
    assert rev() == ""
    (inner / "GIT_REVISION").write_text("abc1234\n")
    assert rev() == "abc1234"
    _git("init", "-q", cwd=inner)
    _git("add", "GIT_REVISION", cwd=inner)
    _git("commit", "-q", "-m", "own", cwd=inner)
    assert rev() == _git("rev-parse", "--short", "HEAD", cwd=inner)
    (inner / "GIT_REVISION").write_text("changed\n")
    assert rev() == _git("rev-parse", "--short", "HEAD", cwd=inner) + "+dirty"


@needs_source
def test_torch_requirement_is_the_build_release():
    req = _torch_requirement()
    assert req("2.13.0+cpu") == "torch==2.13.0"
    assert req("2.5.1") == "torch==2.5.1"
    assert req("2.14.0.dev20260101+cpu") == "torch==2.14.0.dev20260101"
    with pytest.raises(ValueError, match="torch.__version__"):
        req("+cpu")


@needs_source
def test_build_metadata_pins_torch_and_ships_license_and_py_typed(tmp_path):
    # egg_info computes the same metadata the wheel gets, without compiling anything.
    subprocess.run(
        [sys.executable, str(SETUP), "-q", "egg_info", "-e", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )
    info = next(tmp_path.glob("*.egg-info"))
    meta = (info / "PKG-INFO").read_text()
    release = torch.__version__.split("+")[0]
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch") and "extra ==" not in line]
    assert requires == [f"Requires-Dist: torch=={release}"], requires
    assert "License-Expression: BSD-3-Clause" in meta and "License-File: LICENSE" in meta
    extras = {line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Provides-Extra")}
    assert {"plot", "diffusers", "transformers", "npu", "test"} <= extras
    assert 'Requires-Dist: transformers>=5.0; extra == "transformers"' in meta
    assert 'Requires-Dist: diffusers>=0.35; extra == "diffusers"' in meta
    sources = (info / "SOURCES.txt").read_text().split()
    assert "LICENSE" in sources and "python/npu_ops_transformer_ext/py.typed" in sources
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()


def test_installed_wheel_metadata():
    # Only meaningful when the package is imported from an installed wheel (scripts/test.sh).
    try:
        dist = importlib.metadata.distribution("npu_ops_transformer_ext")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("not installed as a distribution")
    if Path(dist.locate_file("npu_ops_transformer_ext/__init__.py")).resolve() != Path(pkg.__file__).resolve():
        pytest.skip("imported from the source tree, not from the installed wheel")
    if dist.read_text("WHEEL") is None:
        pytest.skip("installed from the source tree (egg-info), not from a wheel")
    release = torch.__version__.split("+")[0]
    assert f"torch=={release}" in (dist.requires or [])
    files = {str(f) for f in dist.files or []}
    assert "npu_ops_transformer_ext/py.typed" in files
    assert any(f.endswith("LICENSE") for f in files)
    assert dist.version == pkg.__version__


def test_exports():
    for name in ("for_layout", "rope_inv_freq", "RotaryEmbedding", "rope_matrix", "rope_matrix_qk"):
        assert name in pkg.__all__ and callable(getattr(pkg, name))
    assert (Path(pkg.__file__).parent / "py.typed").exists()


@pytest.mark.parametrize(
    "module",
    [
        "diffusers_patch", "matrices", "parallel", "bench", "precision", "plot", "_cli",
        "ops", "tables", "models", "reference", "sweep", "transformers",
    ],
)
def test_public_functions_have_hints_and_docstrings(module):
    mod = importlib.import_module(f"npu_ops_transformer_ext.{module}")
    assert mod.__doc__
    names = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
    checked = 0
    for name in names:
        fn = getattr(mod, name)
        if not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
            continue
        checked += 1
        assert fn.__doc__, f"{module}.{name} has no docstring"
        sig = inspect.signature(fn)
        assert sig.return_annotation is not inspect.Signature.empty, f"{module}.{name}: return"
        for p in sig.parameters.values():
            assert p.annotation is not inspect.Parameter.empty, f"{module}.{name}({p.name})"
    assert checked
    # and the public methods of its public classes (RotaryEmbedding.forward, ...)
    for name in names:
        cls = getattr(mod, name)
        if not inspect.isclass(cls) or cls.__module__ != mod.__name__:
            continue
        assert cls.__doc__, f"{module}.{name} has no docstring"
        for meth_name, fn in vars(cls).items():
            fn = getattr(fn, "__func__", fn)  # classmethod / staticmethod
            if meth_name.startswith("_") or not inspect.isfunction(fn):
                continue
            assert fn.__doc__, f"{module}.{name}.{meth_name} has no docstring"
            sig = inspect.signature(fn)
            assert sig.return_annotation is not inspect.Signature.empty, f"{name}.{meth_name}: return"
            for p in list(sig.parameters.values())[1:]:
                assert p.annotation is not inspect.Parameter.empty, f"{name}.{meth_name}({p.name})"


ENV_SH = ROOT / "scripts" / "env.sh"


def _source_env(tmp_path, **env):
    import os

    full = {k: v for k, v in os.environ.items() if k not in ("USE_ACTIVE_ENV", "NPU_OPS_VENV")}
    full.update(env)
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{ENV_SH}"; echo "PY=$PY"'],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=full, check=False,
    )


@pytest.mark.skipif(not ENV_SH.exists(), reason="needs the source tree (scripts/)")
def test_scripts_use_the_project_venv_unless_told_otherwise(tmp_path):
    # default: the venv (here an existing fake one, so nothing is created)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text("#!/bin/sh\necho Python 3.fake\n")
    fake.chmod(0o755)
    r = _source_env(tmp_path, NPU_OPS_VENV=str(venv))
    assert r.returncode == 0 and f"PY={fake}" in r.stdout, r.stdout + r.stderr
    # opting out says what it will install where
    r = _source_env(tmp_path, USE_ACTIVE_ENV="1")
    assert r.returncode == 0, r.stderr
    assert "installing into the active environment" in r.stdout and "torch 2.13.0" in r.stdout
    # anything else is refused with the valid values
    r = _source_env(tmp_path, USE_ACTIVE_ENV="yes")
    assert r.returncode == 1 and "must be 0" in r.stderr and "or 1" in r.stderr
