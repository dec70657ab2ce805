"""Environment variables the package reads at run time: valid values work, any other value is a
ValueError that names the variable, the value and the valid values.

Each test runs a fresh interpreter with the variable set before start-up, as a user sets it."""
import json

import pytest
from fresh_python import fresh_env, run_python

# For each value in argv[2] (JSON list), with the variable argv[1] set to it (the first one before
# start-up, the others through os.environ, which the kernel reads on every call), runs rope_matrix on
# inputs that take every kind of path (a 4 MiB output goes through the output cache) and prints the
# outcomes as JSON: the kernel choice and a checksum, or the error.
SCRIPT = r"""
import json, os, sys, torch
import npu_ops_transformer_ext as ext
from npu_ops_transformer_ext.matrices import get_half_matrix
x = torch.randn(1, 4, 1024, 512, generator=torch.Generator().manual_seed(0)).bfloat16()
y = get_half_matrix(512)
sin, cos = torch.randn(2, 1024, 512, generator=torch.Generator().manual_seed(1)).bfloat16().unbind(0)
results = []
for value in json.loads(sys.argv[2]):
    if value is None:
        os.environ.pop(sys.argv[1], None)
    else:
        os.environ[sys.argv[1]] = value
    try:
        out = torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos)
        small = ext.rope_matrix(x[:, :, :3], y, sin[:3], cos[:3])
        choice = torch.ops.npu_ops_transformer_ext._cpu_kernel_choice(x, y, sin, cos)
        results.append({"ok": True, "choice": choice, "sum": float(out.float().sum() + small.float().sum())})
    except Exception as e:
        results.append({"ok": False, "type": type(e).__name__, "msg": str(e).splitlines()[0]})
print(json.dumps(results))
"""

ISA_VALUES = ["generic", "avx2", "avx512", "avx512_bf16"]


def _run(var, values):
    env = fresh_env(**({var: values[0]} if values[0] is not None else {}))
    out = run_python(SCRIPT, var, json.dumps(values), env=env)
    return dict(zip(values, json.loads(out.strip().splitlines()[-1])))


@pytest.fixture(scope="module")
def unset():
    return _run("NPU_OPS_CPU_ISA", [None])[None]


def test_isa_valid_values(unset):
    for value, res in _run("NPU_OPS_CPU_ISA", ISA_VALUES + [""]).items():
        assert res["ok"], (value, res)
        assert res["sum"] == unset["sum"], value  # the same bits on every ISA
        if value:
            # The family taken is the one asked for, or a narrower one this CPU falls back to.
            assert ISA_VALUES.index(res["choice"].split("/")[0]) <= ISA_VALUES.index(value)
        else:
            assert res["choice"] == unset["choice"]


def test_isa_invalid_values_are_rejected():
    for value, res in _run("NPU_OPS_CPU_ISA", ["avx3", "AVX2", "avx512 ", "native", "0"]).items():
        assert not res["ok"] and res["type"] == "ValueError", (value, res)
        assert f'NPU_OPS_CPU_ISA="{value}"' in res["msg"]
        for valid in ISA_VALUES:
            assert valid in res["msg"]


def test_output_cache_valid_values(unset):
    for value, res in _run("NPU_OPS_CPU_OUTPUT_CACHE_MB", ["0", "16", "512", ""]).items():
        assert res["ok"], (value, res)
        assert res["sum"] == unset["sum"], value


def test_output_cache_invalid_values_are_rejected():
    values = ["12MB", "abc", "-1", "1.5", " 16", "99999999999999999999"]
    for value, res in _run("NPU_OPS_CPU_OUTPUT_CACHE_MB", values).items():
        assert not res["ok"] and res["type"] == "ValueError", (value, res)
        assert f'NPU_OPS_CPU_OUTPUT_CACHE_MB="{value}"' in res["msg"]
        assert "whole number of MiB" in res["msg"] and "0 turns the cache off" in res["msg"]


def test_isa_invalid_value_is_rejected_by_a_call_that_moves_nothing():
    script = (
        "import torch, npu_ops_transformer_ext as ext\n"
        "try:\n"
        "    ext.rope_matrix(torch.randn(2, 0, 8), ext.get_half_matrix(8), torch.randn(0, 8), torch.randn(0, 8))\n"
        "    print('accepted')\n"
        "except ValueError as e:\n"
        "    print(str(e).splitlines()[0])\n"
    )
    out = run_python(script, env=fresh_env(NPU_OPS_CPU_ISA="avx3"))
    assert 'NPU_OPS_CPU_ISA="avx3" is not valid' in out


def test_output_cache_invalid_value_is_rejected_by_every_op():
    # Also by the in-place op, which allocates no output, and by calls that move nothing; x is
    # left as it was.
    script = (
        "import torch, npu_ops_transformer_ext as ext\n"
        "ops = torch.ops.npu_ops_transformer_ext\n"
        "y = ext.get_half_matrix(8)\n"
        "for shape in ((2, 4, 8), (2, 0, 8)):\n"
        "    x = torch.randn(shape)\n"
        "    before = x.clone()\n"
        "    t = torch.randn(shape[1], 8)\n"
        "    for name, call in (('rope_matrix', lambda: ops.rope_matrix(x, y, t, t)),\n"
        "                       ('rope_matrix_qk', lambda: ops.rope_matrix_qk(x, x, y, t, t)),\n"
        "                       ('rope_matrix_', lambda: ops.rope_matrix_(x, y, t, t))):\n"
        "        try:\n"
        "            call()\n"
        "            print(name, shape[1], 'accepted')\n"
        "        except ValueError as e:\n"
        "            print(name, shape[1], 'ValueError', 'NPU_OPS_CPU_OUTPUT_CACHE_MB=\"12MB\" is not valid' in str(e))\n"
        "    print('unchanged', torch.equal(x, before))\n"
    )
    out = run_python(script, env=fresh_env(NPU_OPS_CPU_OUTPUT_CACHE_MB="12MB")).strip().splitlines()
    want = []
    for s in (4, 0):
        want += [f"{op} {s} ValueError True" for op in ("rope_matrix", "rope_matrix_qk", "rope_matrix_")]
        want.append("unchanged True")
    assert out == want
