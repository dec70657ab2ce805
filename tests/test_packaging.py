"""What a user depending on the package gets: the torch pin of a built wheel, LICENSE and py.typed,
the exports, type hints and docstrings."""

import ast
import importlib
import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path

import npu_ops_transformer_ext as pkg
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "setup.py"
needs_source = pytest.mark.skipif(not SETUP.exists(), reason="needs the source tree (setup.py)")


def _torch_requirement():
    """setup.py's torch_requirement, without running setup()."""
    tree = ast.parse(SETUP.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "torch_requirement")
    ns = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(SETUP), "exec"), ns)  # noqa: S102  (our own setup.py function, without running setup())
    return ns["torch_requirement"]


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
