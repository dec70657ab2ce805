"""python -m npu_ops_transformer_ext.plot: draws the bench CSV, legend off the data, and says what
to install without matplotlib."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from npu_ops_transformer_ext import _cli, plot

PROVIDERS = ["rope_matrix", "rope_matrix_nocache", "eager_v1", "eager_v3", "compile_v1", "clone", "copy_"]


def _csv(path, with_copy=True):
    fields = ["op", "mode", "provider", "median_ms", "x_clone", "x_copy", "version", "git", "shape",
              "dtype", "cpu", "threads"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for i, mode in enumerate(["half", "interleave", "3d", "dense"]):
            for j, p in enumerate(PROVIDERS):
                if not with_copy and p == "copy_":
                    continue
                w.writerow({"op": "rope_matrix", "mode": mode, "provider": p, "median_ms": 1 + i + j,
                            "x_clone": (1 + j) / 6, "x_copy": (1 + j) if with_copy else "",
                            "version": "0.1.0", "git": "abc1234", "shape": "1x2x16x128",
                            "dtype": "bfloat16", "cpu": "cpu", "threads": 2})
    return path


def test_legend_does_not_cover_the_data(tmp_path):
    pytest.importorskip("matplotlib")
    fig = plot.draw(str(_csv(tmp_path / "b.csv")))
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == plot.ORDER
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # right of the axes
    assert "abc1234" in ax.get_title()


def test_main_writes_the_image_and_falls_back_without_copy(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sub" / "b.png"
    assert plot.main([str(_csv(tmp_path / "b.csv", with_copy=False)), "-o", str(out)]) == 0
    assert out.stat().st_size > 1000 and "wrote" in capsys.readouterr().out
    data, _, label = plot.read_csv(str(tmp_path / "b.csv"))
    assert "clone" in label and data["half"]["rope_matrix"] == pytest.approx(1 / 6)


def test_without_matplotlib_it_says_what_to_install(tmp_path, monkeypatch, capsys):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert plot.main([str(_csv(tmp_path / "b.csv")), "-o", str(tmp_path / "b.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()


def test_module_entry_point_and_help():
    r = subprocess.run([sys.executable, "-m", "npu_ops_transformer_ext.plot", "--help"],
                       capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.startswith("usage: python -m npu_ops_transformer_ext.plot")
    assert "(default: bench_results/rope_matrix_cpu.png)" in r.stdout


def test_old_script_still_works():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "plot_bench.py"
    if not script.exists():
        pytest.skip("needs the source tree")
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                       timeout=60, check=True)
    assert "npu_ops_transformer_ext.plot" in r.stdout


def test_a_csv_that_is_missing_or_not_a_bench_csv_is_an_option_error(tmp_path, capsys):
    # exit status 2 and a message naming the file, not a traceback; checked before matplotlib
    header_only = tmp_path / "header.csv"
    header_only.write_text("op,mode,provider,median_ms,x_copy\n")
    sweep_csv = tmp_path / "sweep.csv"
    sweep_csv.write_text("S,x_bytes,dtype,layout,mode,threads,provider,median_ms,x_limit,x_copy\n"
                         "256,1572864,bfloat16,bnsd,half,1,rope_matrix,0.1,1.2,1.1\n")
    bad_value = tmp_path / "bad.csv"
    bad_value.write_text("op,mode,provider,median_ms,x_copy\nrope_matrix,half,rope_matrix,0.1,fast\n")
    truncated = tmp_path / "truncated.csv"  # a run cut short mid-row (was: drawn as NaN, "None" in the title)
    truncated.write_text("op,mode,provider,median_ms,x_copy,version,git,shape\n"
                         "rope_matrix,half,rope_matrix,0.1,1.0,0.1,abc,1x2x16x128\nrope_matrix,half,clone,0.3")
    for path, message in (
        (tmp_path / "missing.csv", f"cannot read {tmp_path / 'missing.csv'}: No such file or directory"),
        (tmp_path, f"cannot read {tmp_path}:"),
        (header_only, f"{header_only}: no rows (expected the CSV of python -m npu_ops_transformer_ext.bench)"),
        (sweep_csv, (f"{sweep_csv}: no column op (expected the CSV of python -m npu_ops_transformer_ext.bench); "
                     "a sweep CSV is drawn by python -m npu_ops_transformer_ext.sweep --summarize")),
        (bad_value, f"{bad_value} line 2: x_copy = 'fast' is not a number"),
        (truncated, (f"{truncated} line 3: 4 fields where the header has 8 (expected the CSV of "
                     "python -m npu_ops_transformer_ext.bench)")),
    ):
        with pytest.raises(SystemExit) as e:
            plot.main([str(path), "-o", str(tmp_path / "out.png")])
        assert e.value.code == 2, path
        assert message in " ".join(capsys.readouterr().err.split()), path
    assert not (tmp_path / "out.png").exists()


def test_module_entry_point_on_a_missing_csv_exits_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "npu_ops_transformer_ext.plot", str(tmp_path / "none.csv"),
                        "-o", str(tmp_path / "b.png")], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot read" in r.stderr, r.stderr


def test_an_output_that_cannot_be_written_is_an_option_error(tmp_path, monkeypatch, capsys):
    # exit status 2 and a message naming --out, before the CSV is drawn (was: matplotlib's
    # "Format 'xyz' is not supported" or IsADirectoryError, exit 1, after drawing)
    src = str(_csv(tmp_path / "b.csv"))
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    for out, message in (
        (tmp_path / "out.xyz", (f"--out {tmp_path / 'out.xyz'}: 'xyz' is not an image format matplotlib "
                                "writes; end the name with one of .")),
        (tmp_path, f"--out {tmp_path} is a directory; give a file name"),
        (not_a_folder / "b.png", f"cannot create its folder {not_a_folder}: {not_a_folder} is not a directory"),
    ):
        with pytest.raises(SystemExit) as e:
            plot.main([src, "-o", str(out)])
        assert e.value.code == 2, out
        err = " ".join(capsys.readouterr().err.split())
        assert message in err, (out, err)
    assert not (tmp_path / "out.xyz").exists()
    # without matplotlib the formats savefig writes are a fixed list
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit) as e:
        plot.main([src, "-o", str(tmp_path / "out.xyz")])
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and f"end the name with one of .{', .'.join(_cli.IMAGE_FORMATS)}" in err
    assert plot.main([src, "-o", str(tmp_path / "b.SVG")]) == 2  # a valid name: then matplotlib is missing
    assert "pip install matplotlib" in capsys.readouterr().err
