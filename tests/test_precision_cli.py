"""The precision CLI (python -m npu_ops_transformer_ext.precision): runs, reports, and fails."""

import subprocess
import sys

import torch
from npu_ops_transformer_ext import precision


def test_small_run_passes_and_reports_every_case(capsys):
    assert precision.main(["--small"]) == 0
    out = capsys.readouterr().out
    for dims in ("1d", "2d", "3d"):
        for mode in ("half", "interleave"):
            for ver in ("v1", "v2", "v3", "v5"):
                assert any(
                    line.split()[:2] == [f"{dims}-{mode}", ver] for line in out.splitlines()
                ), (dims, mode, ver)
    # our op is bit-exact against the fp32 contract for signed-permutation matrices
    v5 = [
        line.split()
        for line in out.splitlines()
        if len(line.split()) == 5 and line.split()[1] == "v5"
    ]
    assert len(v5) == 6
    assert all(float(r[2]) == 0 and int(r[3]) == 0 for r in v5)


def test_fails_when_the_op_is_wrong(monkeypatch, capsys):
    # a v5 that forgets the sin term must push the exit status to 1
    monkeypatch.setattr(
        precision, "_v5", lambda x, mat, sin, cos: (x.float() * cos.float()).to(x.dtype)
    )
    assert precision.main(["--small", "--dims", "1d", "--modes", "half"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_metric_is_signed():
    a = torch.tensor([1.0, -2.0, 3.0])
    metric, nonzero, max_abs = precision.seed_metric(a, a * torch.tensor([1.0, 1.0, -1.0]))
    assert nonzero == 1 and max_abs == 6.0 and abs(metric - 2.0) < 1e-6  # |a| vs |b| would see none


def test_sections_for():
    assert precision.sections_for("3d", 128) == [44, 44, 40]
    assert precision.sections_for("2d", 64) == [32, 32]
    assert sum(precision.sections_for("3d", 96)) == 96
    assert precision.sections_for("3d", 64) == [22, 22, 20]
    assert precision.sections_for("2d", 34) == [16, 18]  # D/2 odd: even parts


def test_cli_entry_point_fp32_tables():
    # the child finds the package the way this process did (installed wheel, or PYTHONPATH)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_ops_transformer_ext.precision",
            "--shape",
            "1,2,33,64",
            "--dims",
            "3d",
            "--table-dtype",
            "fp32",
            "--dtype",
            "fp16",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: v5 within threshold" in r.stdout


def test_help_lists_every_option_with_default_and_values(capsys):
    import pytest

    with pytest.raises(SystemExit):
        precision.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m npu_ops_transformer_ext.precision")
    for opt in ("--shape", "--small", "--dtype", "--table-dtype", "--dims", "--modes", "--device",
                "--threshold", "--seed", "--progress"):
        assert opt in out
    for text in ("{bf16,fp16,fp32}", "{same,fp32}", "1d, 2d, 3d", "half, interleave", "(default: bf16)",
                 "(default: 1d,2d,3d)", "(default: 1,24,28800,128", "(default: auto)", "(default: 0)"):
        assert text in out


def test_unknown_dims_are_refused(capsys):
    import pytest

    with pytest.raises(SystemExit):
        precision.main(["--small", "--dims", "1d,4d"])
    assert "choose from 1d, 2d, 3d" in capsys.readouterr().err


def test_progress_on_small_run(capsys):
    import pytest

    pytest.importorskip("tqdm")
    assert precision.main(["--small", "--dims", "1d", "--progress", "on"]) == 0
    captured = capsys.readouterr()
    assert "/2 [" in captured.err and "OK: v5 within threshold" in captured.out
    assert "npu_ops_transformer_ext" in captured.out.splitlines()[0]
