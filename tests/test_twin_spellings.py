"""The twin's Ascend C headers (twin/include) accept only the API spellings every supported CANN
version (8.0.RC2 to 9.x) has, so a version-specific name fails to compile here as it would on some
toolkit; the copy parameter structs have the real header's fields (their types and order are
static_asserts in basic_api/kernel_struct_data_copy.h). Each snippet is type-checked with g++ (-fsyntax-only); the portable control must compile."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")

HEAD = '#define ASCENDC_CUBE_ONLY\n#include "kernel_operator.h"\n#include "lib/matmul_intf.h"\n'
MT = "matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, {}>"

CONTROL = HEAD + (
    "using A = " + MT.format("bfloat16_t") + ";\nusing Bias = " + MT.format("float") + ";\n"
    "matmul::Matmul<A, A, A, Bias> mm;\n"
    "int64_t cube() { return (AscendC::GetBlockIdx() - AscendC::GetSubBlockIdx()) / 2; }\n"
    # the copy parameter structs with the real header's field names and constructors
    "AscendC::DataCopyParams dp(1, 2, 3, 4);\n"
    "uint16_t gaps() { dp.srcGap = 1; dp.dstStride = 2; return dp.srcStride + dp.dstGap; }\n"
    "AscendC::DataCopyExtParams ep{1, 64, 0, 0, 0};\n"
    "AscendC::DataCopyPadExtParams<half> pp{false, 0, 0, half{}};\n"
)

# name: (source, text the first error must contain)
BAD = {
    "GetTaskRatio (9.x only)": (HEAD + "int64_t r() { return AscendC::GetTaskRatio(); }\n", "GetTaskRatio"),
    "GetTaskRation (older only)": (HEAD + "int64_t r() { return AscendC::GetTaskRation(); }\n", "GetTaskRation"),
    "AscendC::MatmulType (newer only)": (
        HEAD + "using A = AscendC::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, half>;\n",
        "MatmulType",
    ),
    "default bf16 bias type": (
        HEAD + "using A = " + MT.format("bfloat16_t") + ";\nmatmul::Matmul<A, A, A> mm;\n",
        "pass BIAS_TYPE explicitly",
    ),
    "srcGap on DataCopyExtParams (DataCopyParams only)": (
        HEAD + "uint32_t g(AscendC::DataCopyExtParams& p) { return p.srcGap; }\n",
        "srcGap",
    ),
    "DataCopyExtParams with a field too many": (
        HEAD + "AscendC::DataCopyExtParams p{1, 64, 0, 0, 0, 0};\n",
        "DataCopyExtParams",
    ),
    "ASCENDC_CUBE_ONLY after kernel_operator.h": (
        '#include "kernel_operator.h"\n#define ASCENDC_CUBE_ONLY\n#include "lib/matmul_intf.h"\n',
        "before every Ascend C include",
    ),
}


def _check(src: str, tmp: Path, name: str) -> subprocess.CompletedProcess:
    f = tmp / (name.replace(" ", "_").replace("(", "").replace(")", "").replace(".", "").replace(":", "") + ".cpp")
    f.write_text(src)
    cmd = ["g++", "-std=c++17", "-fsyntax-only", f"-I{ROOT / 'twin' / 'include'}", f"-I{ROOT}", str(f)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spellings")
    jobs = {"control": CONTROL, **{k: v[0] for k, v in BAD.items()}}
    with ThreadPoolExecutor(max_workers=2) as pool:
        fut = {k: pool.submit(_check, v, tmp, k) for k, v in jobs.items()}
        return {k: f.result() for k, f in fut.items()}


def test_portable_spellings_compile(results):
    r = results["control"]
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("name", list(BAD))
def test_version_specific_spelling_fails(results, name):
    r = results[name]
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert r.returncode != 0 and errors, f"{name} compiled against the twin"
    assert BAD[name][1] in errors[0], errors[:3]
