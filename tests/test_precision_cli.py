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


def test_fails_when_the_op_gives_nan_or_inf(monkeypatch, capsys):
    # NaN and Inf compare false with every threshold: they must count as infinite errors
    real = precision._v5
    for value in (float("nan"), float("inf"), float("-inf")):
        def bad(x, mat, sin, cos, value=value):
            out = real(x, mat, sin, cos).clone()
            out.view(-1)[5] = value
            return out

        monkeypatch.setattr(precision, "_v5", bad)
        assert precision.main(["--small", "--dims", "1d", "--modes", "half", "--progress", "off"]) == 1
        v5 = [f for f in map(str.split, capsys.readouterr().out.splitlines()) if f[:2] == ["1d-half", "v5"]]
        assert v5 == [["1d-half", "v5", "inf", "1", "inf", "FAIL"]], value


def test_fails_when_the_matrix_is_wrong(monkeypatch, capsys):
    # v5 and the golden both take rope_nd's matrix: a wrong matrix (here the inverse rotation)
    # must still fail, through the rearranging reference (ref) that does not use it
    real = precision.rope_nd

    def transposed(*args, **kwargs):
        t = real(*args, **kwargs)
        return t._replace(mat=t.mat.mT.contiguous())

    monkeypatch.setattr(precision, "rope_nd", transposed)
    assert precision.main(["--small", "--dims", "1d,3d", "--modes", "half", "--progress", "off"]) == 1
    rows = {(f[0], f[1]): f for f in map(str.split, capsys.readouterr().out.splitlines()) if len(f) >= 5}
    for case in ("1d-half", "3d-half"):
        assert rows[(case, "ref")][-1] == "FAIL" and float(rows[(case, "ref")][2]) > 0
        assert float(rows[(case, "v5")][2]) == 0  # the op matches the wrong golden it was given


def test_metric_of_special_values():
    nan, inf = float("nan"), float("inf")
    # equal values, the same infinity, and NaN in both are no error
    assert precision.seed_metric(torch.tensor([1.0, inf, -inf, nan]), torch.tensor([1.0, inf, -inf, nan])) == (0.0, 0, 0.0)
    # NaN or an infinity against another value is an infinite error, counted once each
    for a, b in ((nan, 1.0), (1.0, nan), (inf, 1.0), (1.0, -inf), (inf, -inf), (nan, inf)):
        assert precision.seed_metric(torch.tensor([a, 2.0]), torch.tensor([b, 2.0])) == (inf, 1, inf), (a, b)


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
    assert "OK: v5 within threshold and ref equal to the golden" in r.stdout


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


def test_repeated_dims_and_modes_run_once(capsys):
    assert precision.main(["--shape", "1,1,3,8", "--dims", "1d,2d,1d", "--modes", "half,half",
                           "--progress", "off"]) == 0
    cases = [f[0] for f in map(str.split, capsys.readouterr().out.splitlines()) if len(f) == 5 and f[1] == "v5"]
    assert cases == ["1d-half", "2d-half"]


def test_min_dim_of_each_dims_is_where_its_split_has_even_positive_parts():
    # the D the option errors below name: every part of sections_for positive and even
    for dims, low in precision.MIN_DIM.items():
        for d in range(1, 400):
            parts = precision.sections_for(dims, d)
            assert (min(parts) > 0 and all(p % 2 == 0 for p in parts)) == (d % 2 == 0 and d >= low), (dims, d)


def test_smallest_head_dims_run():
    for d, dims in ((2, "1d"), (4, "1d,2d"), (6, "1d,2d,3d")):
        assert precision.main(["--shape", f"1,1,3,{d}", "--dims", dims, "--progress", "off"]) == 0


SPLITS = "valid D: 1d even >= 2, 2d even >= 4, 3d even >= 6"


def test_bad_options_exit_2_naming_the_option(monkeypatch, capsys):
    """Option errors exit with 2 (argparse), not with 1 (a precision failure) or a traceback."""
    import pytest

    monkeypatch.setattr(precision, "_npu_available", lambda: False)  # as on a machine without an NPU
    small = ["--small", "--dims", "1d", "--modes", "half", "--progress", "off"]
    for argv, message in (
        (["--shape", "1,2,5,7"], f"--dims 1d needs an even D >= 2, got D = 7 from --shape 1,2,5,7 (split [7]); {SPLITS}"),
        (["--shape", "1,2,5,2"], f"--dims 2d needs an even D >= 4, got D = 2 from --shape 1,2,5,2 (split [0, 2]); {SPLITS}"),
        (["--shape", "1,2,5,4", "--dims", "3d"],
         f"--dims 3d needs an even D >= 6, got D = 4 from --shape 1,2,5,4 (split [2, 2, 0]); {SPLITS}"),
        ([*small, "--device", "foo"], "--device must be auto, cpu, npu or npu:N, got 'foo'"),
        ([*small, "--device", "npu"], ("--device npu: no NPU here (torch_npu is not installed or finds none); "
                                       "use --device cpu or auto")),
        ([*small, "--threshold", "nan"], "--threshold must be a finite number >= 0, got nan"),
        ([*small, "--threshold", "inf"], "--threshold must be a finite number >= 0, got inf"),
        ([*small, "--threshold", "-0.5"], "--threshold must be a finite number >= 0, got -0.5"),
        ([*small, "--dims", ","], "--dims and --modes need at least one entry each"),
        ([*small, "--seed", "99999999999999999999"], "--seed must be an integer from 0 to 2**32 - 1 = 4294967295"),
        ([*small, "--seed", "4611686018427387904"], "--seed must be an integer from 0 to 2**32 - 1"),  # seed * 100
        ([*small, "--seed", "-1"], "--seed must be an integer from 0 to 2**32 - 1 = 4294967295, got -1"),
        ([*small, "--shape", "1,1,4,8"], "--small (the shape 1,3,97,128) and --shape 1,1,4,8 exclude each other"),
    ):
        with pytest.raises(SystemExit) as e:
            precision.main(argv)
        assert e.value.code == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert message in err, (argv, err)
    assert precision.main([*small, "--threshold", "0"]) == 0  # bit-exact: 0 is a valid threshold
    assert precision.main([*small, "--seed", str(2**32 - 1)]) == 0


def test_cli_entry_point_option_error_is_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "npu_ops_transformer_ext.precision", "--shape", "1,2,5,7"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "--dims 1d needs an even D >= 2" in r.stderr


def test_a_case_gives_the_same_rows_whichever_cases_run_with_it(capsys):
    # The table seed was the case's place in --dims/--modes: 3d-interleave gave three different v1
    # rows alone, with the other modes and with every case.
    def rows(*argv):
        assert precision.main(["--shape", "1,2,9,128", "--progress", "off", *argv]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("3d-interleave")]

    alone = rows("--dims", "3d", "--modes", "interleave")
    assert len(alone) >= 4
    assert rows("--dims", "3d") == alone
    assert rows("--dims", "2d,1d,3d", "--modes", "interleave,half") == alone
