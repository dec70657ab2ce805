"""The twin's host matmul tiling (twin/include/tiling/tiling_api.h) rejects what CANN's
MultiCoreMatmulTiling rejects: each case returns the code CANN's implementation returns
(asc-devkit impl/adv_api/tiling/matmul: matmul_tiling_base.cpp SetFixSplit, SetBufferSpace and
CheckSetParam; bmm_tiling.cpp SetDim, SetShape, SetSingleShape; matmul_tiling_algorithm.cpp
CheckBaseMN; docs/zh/api/SIMD-API/高阶API/矩阵计算/Matmul-Tiling类/SetFixSplit.md). One C++ program,
compiled with g++ against the twin's headers, runs every case and prints its codes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")

# name: (C++ statements on `t`, a MultiCoreMatmulTiling for bf16 [80, 128] @ [128, 128] on 20 cores,
#        the codes they must return, in order). `T` runs GetTiling into `out`.
CASES = {
    "control": ("T", [0]),
    "SetFixSplit 0": ("t.SetFixSplit(0, -1, -1)", [-1]),
    "SetFixSplit baseM not a multiple of 16": ("t.SetFixSplit(24, -1, -1)", [-1]),
    "SetFixSplit baseN not a multiple of 16": ("t.SetFixSplit(-1, 40, -1)", [-1]),
    "SetFixSplit baseK not a multiple of k0 = 16 (bf16)": ("t.SetFixSplit(-1, -1, 8)", [-1]),
    # CANN's code takes a baseK that is a multiple of k0; SetFixSplit.md says only -1 is supported,
    # and the twin holds to the page.
    "SetFixSplit baseK other than -1 (fp32, a multiple of k0 = 8)": (
        "t.SetAType(TPosition::GM, CubeFormat::ND, DataType::DT_FLOAT); t.SetFixSplit(-1, -1, 8)",
        [0, -1],
    ),
    "SetFixSplit baseK other than -1 (bf16, a multiple of k0 = 16)": ("t.SetFixSplit(-1, -1, 64)", [-1]),
    "SetFixSplit 64 x 64 tiles": ("t.SetFixSplit(64, 64, -1); T; out.get_baseM() == 64 && out.get_baseN() == 64", [0, 0, 1]),
    "SetBufferSpace L1 over the platform's": ("t.SetBufferSpace(600 * 1024, -1, -1)", [-1]),
    "SetBufferSpace L0C over the platform's": ("t.SetBufferSpace(-1, 256 * 1024, -1)", [-1]),
    "SetBufferSpace UB over the platform's": ("t.SetBufferSpace(-1, -1, 300000)", [-1]),
    "SetBufferSpace below -1": ("t.SetBufferSpace(-2, -1, -1)", [-1]),
    "SetBufferSpace within the platform's": ("t.SetBufferSpace(256 * 1024, 64 * 1024, -1); T", [0, 0]),
    "SetShape with a zero tiles nothing": ("t.SetShape(0, 128, 128); T", [0, -1]),
    "SetDim 0 is stored (CANN returns 0)": ("t.SetDim(0)", [0]),
    "fixed base block over L0C": ("t.SetFixSplit(256, 256, -1); T", [0, -1]),
    "fixed baseM over singleM rounded up to 16": ("t.SetShape(20, 128, 128); t.SetSingleShape(20, 128, 128); t.SetFixSplit(48, -1, -1); T", [0, 0, 0, -1]),
    "fixed baseM within singleM rounded up to 16": ("t.SetShape(20, 128, 128); t.SetSingleShape(20, 128, 128); t.SetFixSplit(32, -1, -1); T", [0, 0, 0, 0]),
}

PROGRAM = r"""
#include <cstdio>
#include "tiling/tiling_api.h"
using namespace matmul_tiling;
int main() {
  fe::PlatFormInfos info;
  info.aicNum = 20;
  info.aivNum = 40;
  info.ubBytes = 196352;
  platform_ascendc::PlatformAscendC plat(&info);
%s
  return 0;
}
"""


def _case_code(i: int, stmts: str) -> str:
    lines = [
        "  {",
        "    MultiCoreMatmulTiling t(plat);",
        "    optiling::TCubeTiling out;",
        "    t.SetDim(20);",
        "    t.SetAType(TPosition::GM, CubeFormat::ND, DataType::DT_BFLOAT16);",
        "    t.SetBType(TPosition::GM, CubeFormat::ND, DataType::DT_BFLOAT16);",
        "    t.SetCType(TPosition::GM, CubeFormat::ND, DataType::DT_BFLOAT16);",
        "    t.SetOrgShape(80, 128, 128);",
        "    t.SetShape(80, 128, 128);",
    ]
    for st in stmts.split(";"):
        st = st.strip()
        expr = "t.GetTiling(out)" if st == "T" else st
        lines.append(f'    std::printf("{i} %lld\\n", static_cast<long long>({expr}));')
    lines.append("  }")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def codes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mmtiling")
    src = tmp / "cases.cpp"
    src.write_text(PROGRAM % "\n".join(_case_code(i, v[0]) for i, v in enumerate(CASES.values())))
    exe = tmp / "cases"
    cc = subprocess.run(
        ["g++", "-std=c++17", f"-I{ROOT / 'twin' / 'include'}", str(src), "-o", str(exe)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert cc.returncode == 0, cc.stderr[-2000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True)
    got: dict[int, list[int]] = {}
    for line in run.stdout.splitlines():
        i, v = line.split()
        got.setdefault(int(i), []).append(int(v))
    return got


@pytest.mark.parametrize("name", list(CASES))
def test_matmul_tiling_returns_what_cann_returns(codes, name):
    i = list(CASES).index(name)
    assert codes[i] == CASES[name][1], name
