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
