"""The benchmark CLI runs and writes the long-format CSV it documents (a smoke test, not a timing)."""
import csv
import subprocess
import sys
from pathlib import Path

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
