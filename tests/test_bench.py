"""The benchmark CLI runs and writes the long-format CSV it documents (a smoke test, not a timing)."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest
from npu_ops_transformer_ext import bench


def test_bench_cli_writes_csv(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    bench.main(["--shape", "1,2,16,128", "--iters", "2", "--warmup", "1", "--modes", "half,3d,dense",
                "--providers", "rope_matrix,rope_matrix_nocache,eager_v1,eager_v3,clone,copy_",
                "--csv", str(out)])
    rows = list(csv.DictReader(out.open()))
    printed = capsys.readouterr().out
    assert "rope_matrix benchmark" in printed
    got = {(r["mode"], r["provider"]) for r in rows}
    # eager_v1 has no dense form; everything else is there for every mode.
    assert ("dense", "eager_v1") not in got
    assert {("half", "rope_matrix"), ("3d", "eager_v1"), ("dense", "copy_"), ("3d", "rope_matrix_nocache")} <= got
    for r in rows:
        assert float(r["median_ms"]) > 0 and float(r["gbps"]) > 0
        assert r["shape"] == "1x2x16x128" and r["dtype"] == "bfloat16" and r["threads"]
        if r["provider"] == "copy_":
            assert float(r["x_copy"]) == 1.0


def test_bench_figures_keep_significant_digits():
    # A tiny shape moves a few KB in milliseconds: its GB/s must not print as 0.
    assert bench._sig(16384 / 5.795e-3 / 1e9) == 0.002827
    assert bench._sig(1234.5678) == 1235.0
    assert bench._sig(1.2345, 3) == 1.23


def test_decode_benchmark_script_runs():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_decode.py"
    out = subprocess.run([sys.executable, str(script), "--calls", "5", "--batches", "1,2",
                          "--steps", "5"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    # Two tables (per call, then per decode step), each: a title line, a header, one row per B.
    tables = [t.splitlines() for t in out.strip().split("\n\n")]
    assert len(tables) == 2
    for lines in tables:
        rows = [line.split() for line in lines[2:]]
        assert [r[0] for r in rows] == ["1", "2"] and all(float(v) > 0 for r in rows for v in r[1:])


def test_help_lists_every_option_with_default_and_values(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m npu_ops_transformer_ext.bench")
    for opt in ("--shape", "--dtype", "--modes", "--providers", "--warmup", "--iters", "--threads",
                "--csv", "--progress"):
        assert opt in out
    for value in (*bench.MODES, *bench.PROVIDERS, "{bfloat16,float16,float32}", "{auto,on,off}"):
        assert value in out
    for default in ("(default: 1,24,8192,128)", "(default: 20)", "(default: 3)", "(default: auto)",
                    "(default: bfloat16)", "(default: bench_results/rope_matrix_cpu.csv)"):
        assert default in out


def test_csv_records_version_and_git(tmp_path):
    import npu_ops_transformer_ext

    out = tmp_path / "b.csv"
    bench.main(["--shape", "1,1,8,128", "--iters", "1", "--warmup", "0", "--modes", "half",
                "--providers", "rope_matrix,clone", "--csv", str(out), "--progress", "off"])
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["version"] == npu_ops_transformer_ext.__version__ for r in rows)
    assert all(r["git"] for r in rows)  # a hash in a checkout or a built wheel, else "unknown"


def test_progress_bar_and_quiet_fallback_without_tqdm(tmp_path, monkeypatch, capsys):
    args = ["--shape", "1,1,8,128", "--iters", "2", "--warmup", "1", "--modes", "half,dense",
            "--providers", "rope_matrix,clone", "--csv", "", "--progress", "on"]
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "tqdm", None)  # as if tqdm were not installed
        bench.main(args)
    captured = capsys.readouterr()
    assert captured.err == "" and "rope_matrix benchmark" in captured.out
    pytest.importorskip("tqdm")
    bench.main(args)
    err = capsys.readouterr().err
    assert "bench" in err and "/12 [" in err  # (1 warmup + 2 timed) x 2 providers x 2 modes


def test_bad_arguments_name_the_valid_values(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--modes", "half,diagonal"])
    assert "choose from half, interleave, 3d, dense" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--shape", "1,2,3"])
    assert "B,N,S,D" in capsys.readouterr().err
