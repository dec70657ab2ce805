"""The NPU launcher and host code compile against the real torch_npu and ACL headers (no NPU, no CANN).

The ``torch-npu`` wheel matching the installed torch is downloaded (not installed) and its headers
(``torch_npu/include``: ``torch_npu/csrc/core/npu/NPUStream.h``, ``third_party/acl/inc/acl/*.h``) are
extracted; ``torch_interface.cpp`` and ``op_host/*.cpp`` are then compiled with the host compiler
(``-fsyntax-only``) against them and torch's own headers. The launch wrappers ``aclrtlaunch_<kernel>.h``
are generated from the kernel entry points in ``op_kernel/`` the way CANN's ``ascendc_library``
generates them. Headers that only the CANN toolkit ships (``tiling/platform/platform_ascendc.h``,
``tiling/tiling_api.h``, ``kernel_tiling/kernel_tiling.h``) come from the CPU twin (``twin/include``),
so their declarations are checked against the twin's copy, not CANN's; ``test_only_cann_headers_from_twin``
lists exactly which ones were taken from there.

The wheel and its extracted headers are cached in ``$NPU_OPS_WHEEL_CACHE`` (default
``~/.cache/npu_ops_transformer_ext``); without a cached wheel and without access to the package index
every test here skips with a one-line reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TWIN_INCLUDE = ROOT / "twin" / "include"
# CANN-only headers the host code may take from the twin; any other twin header is an error.
CANN_ONLY_FROM_TWIN = {"tiling/platform/platform_ascendc.h", "tiling/tiling_api.h", "kernel_tiling/kernel_tiling.h"}
JOBS = 2  # compiles in parallel


def _cache_dir() -> Path:
    d = os.environ.get("NPU_OPS_WHEEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "npu_ops_transformer_ext")
    return Path(d)


def _torch_minor() -> str:
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def _find_wheel(wheels: Path, minor: str):
    found = sorted(wheels.glob(f"torch_npu-{minor}.*.whl")) if wheels.is_dir() else []
    return found[-1] if found else None


def _fetch_wheel() -> tuple[Path | None, str]:
    """(wheel, "") from the cache or the package index, or (None, reason)."""
    minor = _torch_minor()
    wheels = _cache_dir() / "wheels"
    whl = _find_wheel(wheels, minor)
    if whl is not None:
        return whl, ""
    wheels.mkdir(parents=True, exist_ok=True)
    # The release matching torch's minor version; the newest release as the nearest fallback.
    last = ""
    for spec in (f"torch-npu=={minor}.*", "torch-npu"):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--timeout", "30",
               "-q", "-d", str(wheels), spec]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            last = str(e)
            continue
        got = sorted(wheels.glob("torch_npu-*.whl"))
        if r.returncode == 0 and got:
            return (_find_wheel(wheels, minor) or got[-1]), ""
        last = (r.stderr.strip().splitlines() or ["pip download failed"])[-1]
    return None, f"torch-npu wheel for torch {minor} not available: {last}"


def _extract_headers(whl: Path) -> Path:
    dest = _cache_dir() / (whl.name[: -len(".whl")] + "-include")
    done = dest / ".complete"
    if not done.exists():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if n.startswith("torch_npu/include/"):
                    z.extract(n, tmp)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        done.touch()
    return dest / "torch_npu" / "include"


# ---- launch wrappers, as ascendc_library generates them ---------------------------------------------
_ENTRY_MACRO = re.compile(
    r"#define\s+(\w+)\(\s*(\w+)[^)]*\)\s*\\?\s*extern\s+\"C\"\s+__global__\s+__aicore__\s+void\s+\2\s*\(([^)]*)\)", re.DOTALL
)
_DIRECT = re.compile(r"extern\s+\"C\"\s+__global__\s+__aicore__\s+void\s+(\w+)\s*\(([^)]*)\)", re.DOTALL)


def kernel_entries(sources) -> dict[str, list[str]]:
    """{kernel name: [parameter declarations]} of every extern "C" __global__ __aicore__ entry point,
    written directly or through a macro whose first argument is the kernel name."""
    out: dict[str, list[str]] = {}
    for src in sources:
        text = Path(src).read_text()
        macros = {}
        for m in _ENTRY_MACRO.finditer(text):
            macros[m.group(1)] = m.group(3)
        for m in _DIRECT.finditer(text):
            name = m.group(1)
            if name not in {mm.group(2) for mm in _ENTRY_MACRO.finditer(text)}:
                out[name] = _params(m.group(2))
        for macro, params in macros.items():
            for call in re.finditer(rf"^\s*{macro}\(\s*(\w+)", text, re.MULTILINE):
                out[call.group(1)] = _params(params)
    return out


def _params(text: str) -> list[str]:
    return [" ".join(p.replace("\\", " ").split()) for p in text.split(",") if p.strip()]


def launch_header(name: str, params: list[str]) -> str:
    """aclrtlaunch_<name>.h: GM pointers become void*, numBlocks and the stream come first, the
    return type is uint32_t (CANN's extract_host_stub.py)."""
    decl = []
    for p in params:
        ptype, pname = p.rsplit(" ", 1)
        decl.append(f"void* {pname}" if ptype in ("GM_ADDR", "__gm__ uint8_t*") else p)
    guard = f"HEADER_ACLRTLAUNCH_{name.upper()}_H"
    sig = ", ".join(["uint32_t numBlocks", "aclrtStream stream"] + decl)
    return (
        f"#ifndef {guard}\n#define {guard}\n#include \"acl/acl_base.h\"\n\n"
        "#ifndef ACLRT_LAUNCH_KERNEL\n#define ACLRT_LAUNCH_KERNEL(kernel_func) aclrtlaunch_##kernel_func\n#endif\n\n"
        f"extern \"C\" uint32_t aclrtlaunch_{name}({sig});\n#endif\n"
    )


# ---- compiling ----------------------------------------------------------------------------------------
def _compile(src: Path, includes: list[Path]) -> subprocess.CompletedProcess:
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-H", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           "-DTORCH_EXTENSION_NAME=_C"] + [f"-I{p}" for p in includes] + [str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def _errors(r: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if " error: " in ln or ln.startswith("error")]


def _twin_headers(r: subprocess.CompletedProcess) -> set[str]:
    twin = str(TWIN_INCLUDE) + os.sep
    used = set()
    for ln in r.stderr.splitlines():
        m = re.match(r"^\.+ (.*)$", ln)
        if m and os.path.normpath(m.group(1)).startswith(twin):
            used.add(os.path.relpath(os.path.normpath(m.group(1)), TWIN_INCLUDE).replace(os.sep, "/"))
    return used


MISSPELT = ("getCurrentNPUStream", "getCurrentNpuStream")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no g++ on PATH")
    whl, why = _fetch_wheel()
    if whl is None:
        pytest.skip(why)
    npu_inc = _extract_headers(whl)
    gen = tmp_path_factory.mktemp("aclrtlaunch")
    entries = kernel_entries(sorted((ROOT / "op_kernel").glob("*.cpp")))
    assert entries, "no kernel entry points found in op_kernel/*.cpp"
    for name, params in entries.items():
        (gen / f"aclrtlaunch_{name}.h").write_text(launch_header(name, params))
    from torch.utils.cpp_extension import include_paths

    # Real headers first; the twin last, so it only supplies what neither torch nor torch_npu ships.
    includes = [ROOT, gen, npu_inc, npu_inc / "third_party" / "acl" / "inc"]
    includes += [Path(p) for p in include_paths()] + [TWIN_INCLUDE]

    bad_src = gen / "torch_interface_misspelt.cpp"
    text = (ROOT / "torch_interface.cpp").read_text()
    assert MISSPELT[0] in text
    bad_src.write_text(text.replace(MISSPELT[0], MISSPELT[1]))

    sources = {"torch_interface.cpp": ROOT / "torch_interface.cpp"}
    sources.update({f"op_host/{p.name}": p for p in sorted((ROOT / "op_host").glob("*.cpp"))})
    sources["misspelt"] = bad_src
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = {k: pool.submit(_compile, v, includes) for k, v in sources.items()}
        results = {k: f.result() for k, f in futures.items()}
    return {"wheel": whl.name, "entries": entries, "results": results}


def test_launcher_and_host_compile_against_real_headers(compiled):
    failures = {}
    for name, r in compiled["results"].items():
        if name == "misspelt":
            continue
        if r.returncode != 0:
            failures[name] = _errors(r)[:10] or r.stderr.splitlines()[-10:]
    assert not failures, f"against {compiled['wheel']}: " + "; ".join(f"{k}: {v}" for k, v in failures.items())


def test_only_cann_headers_from_twin(compiled):
    used = set()
    for name, r in compiled["results"].items():
        if name != "misspelt":
            used |= _twin_headers(r)
    print(f"\nheaders taken from the twin (CANN-only, not in the {compiled['wheel']} wheel): {sorted(used)}")
    assert used <= CANN_ONLY_FROM_TWIN, f"twin headers beyond the CANN-only ones: {sorted(used - CANN_ONLY_FROM_TWIN)}"
    assert "tiling/platform/platform_ascendc.h" in used  # the launcher does use it (and it is not in the wheel)


def test_a_misspelt_torch_npu_api_fails_to_compile(compiled):
    r = compiled["results"]["misspelt"]
    assert r.returncode != 0
    assert any(MISSPELT[1] in ln for ln in _errors(r)), _errors(r)[:5]


def test_launch_wrappers_as_ascendc_library_writes_them(compiled):
    entries = compiled["entries"]
    assert {"rope_matrix_bf16_bf16", "rope_matrix_fp16_fp32", "rope_matrix_fp32_fp32"} <= set(entries)
    h = launch_header("rope_matrix_bf16_bf16", entries["rope_matrix_bf16_bf16"])
    assert (
        'extern "C" uint32_t aclrtlaunch_rope_matrix_bf16_bf16(uint32_t numBlocks, aclrtStream stream, void* x, '
        "void* y, void* sin, void* cos, void* out, void* workspace, void* tiling);" in h
    )
