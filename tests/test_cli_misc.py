"""What the command-line tools share: whole option names only, output paths and image names checked
before anything runs, the timeline plot's and the decode benchmark's option checks."""
import subprocess
import sys
from pathlib import Path

import pytest
from npu_ops_transformer_ext import bench, plot, precision, sweep, timeline_plot

ROOT = Path(__file__).resolve().parent.parent
TINY_BENCH = ["--shape", "1,1,4,8", "--modes", "dense", "--providers", "rope_matrix", "--iters", "1",
              "--warmup", "0", "--csv", "", "--progress", "off"]


@pytest.mark.parametrize(("main", "argv", "abbrev"), [
    (bench.main, ["--swe", *TINY_BENCH], "--swe"),  # was: the bench itself, --sweep ignored
    (bench.main, ["--npu", *TINY_BENCH], "--npu"),  # was: the bench itself, --npu-model ignored
    (bench.main, [*TINY_BENCH, "--iter", "2"], "--iter"),
    (sweep.main, ["--size", "16", "--dtypes", "bfloat16", "--layouts", "bnsd", "--modes", "half", "--threads", "1",
                  "--heads", "1", "--iters", "1", "--warmup", "0", "--min-time", "0", "--csv", "", "--plot", "",
                  "--quiet"], "--size"),
    (precision.main, ["--smal", "--dims", "1d", "--modes", "half", "--progress", "off"], "--smal"),
    (plot.main, ["missing.csv", "--ou", "x.png"], "--ou"),
    (timeline_plot.main, ["missing.json", "--core", "AIV_0"], "--core"),
])
def test_abbreviated_options_are_refused(main, argv, abbrev, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"unrecognized arguments: {abbrev}" in capsys.readouterr().err


def test_bench_decode_refuses_abbreviations():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_decode.py"), "--call", "5"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "unrecognized arguments: --call" in r.stderr, r.stderr


def _check(tmp_path, path, capsys, image=False):
    """The exit status and message of _cli.check_output_path on ``path`` ("" when it passes)."""
    import argparse

    from npu_ops_transformer_ext import _cli

    try:
        _cli.check_output_path(argparse.ArgumentParser(prog="t"), "--out", str(path), image=image)
    except SystemExit as e:
        return e.code, " ".join(capsys.readouterr().err.split())
    return 0, ""


def test_output_path_check_is_real(tmp_path, capsys):
    # a name ending in a separator, or a folder that exists but takes no new file, is refused (was:
    # accepted, then a crash after the whole run); the check leaves no file behind and an existing
    # file as it was
    code, err = _check(tmp_path, f"{tmp_path / 'newdir'}/", capsys)
    assert code == 2 and f"--out {tmp_path / 'newdir'}/ ends with a path separator; give a file name" in err
    assert not (tmp_path / "newdir").exists()
    if Path("/proc/self").is_dir():
        code, err = _check(tmp_path, "/proc/npu_ops_rt.csv", capsys)
        assert code == 2 and "--out /proc/npu_ops_rt.csv: cannot write it:" in err
    assert _check(tmp_path, tmp_path / "sub" / "new.csv", capsys) == (0, "")
    assert (tmp_path / "sub").is_dir() and not (tmp_path / "sub" / "new.csv").exists()
    old = tmp_path / "old.csv"
    old.write_text("kept\n")
    assert _check(tmp_path, old, capsys) == (0, "") and old.read_text() == "kept\n"


@pytest.mark.parametrize("csv_path", ["{tmp}/newdir/", "/proc/npu_ops_rt.csv"])
def test_bench_and_sweep_refuse_an_unwritable_csv_before_running(csv_path, tmp_path, capsys):
    if csv_path.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    csv_path = csv_path.format(tmp=tmp_path)
    for main, argv in (
        (bench.main, [*TINY_BENCH, "--csv", csv_path]),
        (sweep.main, ["--sizes", "16", "--dtypes", "bfloat16", "--layouts", "bnsd", "--modes", "half",
                      "--threads", "1", "--heads", "1", "--iters", "1", "--warmup", "0", "--min-time", "0",
                      "--plot", "", "--quiet", "--csv", csv_path]),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        captured = capsys.readouterr()
        assert e.value.code == 2 and f"--csv {csv_path}" in captured.err
        assert captured.out == ""  # nothing ran
