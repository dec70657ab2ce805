"""What the command-line tools share: whole option names only, output paths and image names checked
before anything runs, the timeline plot's and the decode benchmark's option checks."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from npu_ops_transformer_ext import bench, npu_model, plot, precision, sweep, timeline_plot

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
    (npu_model.main, ["--sha", "1,1,2,16", "--modes", "dense"], "--sha"),  # was: run with --shape 1,1,2,16
    (bench.main, ["--npu-model", "--sha", "1,1,2,16", "--modes", "dense"], "--sha"),
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


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--frames", "0"], "--frames must be from 1 to 1024 (the rope module's max_seq_len), got 0"),
        (["--height", "-1"], "--height must be from 1 to 1024"),
        (["--width", "0"], "--width must be from 1 to 1024"),
        (["--frames", "2000"], "--frames must be from 1 to 1024 (the rope module's max_seq_len), got 2000"),
        (["--heads", "0"], "--heads must be >= 1, got 0"),
    ],
)
def test_wan_bf16_rope_refuses_sizes_it_cannot_run(argv, message):
    # were tracebacks deep in diffusers, or (--heads 0) a crash after the whole run
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wan_bf16_rope.py"), *argv],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and message in " ".join(r.stderr.split()), r.stderr


def test_sizes_no_memory_holds_are_refused_before_allocating(capsys):
    # were: a raw allocator traceback (exit 1) from inside the run
    from npu_ops_transformer_ext import bench, precision

    for main, argv, message in (
        (bench.main, ["--shape", "1000,1000,1000,128", "--csv", ""],
         "--shape 1000,1000,1000,128 needs at least 476.8 GiB (x and its output in bfloat16), more than this machine's"),
        (sweep.main, ["--sizes", "100000000", "--plot", ""],
         "--sizes 100000000 needs at least 2288.8 GiB (x of --heads 24 x --dim 128 and its output in 4-byte elements)"),
        (precision.main, ["--shape", "1000,1000,1000,128"],
         "--shape 1000,1000,1000,128 needs at least 953.7 GiB (x in float32 and its output)"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in " ".join(capsys.readouterr().err.split()), argv


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
    # a dangling symlink: the probe creates the link's target, and removes that again
    link = tmp_path / "link.png"
    link.symlink_to(tmp_path / "target.png")
    assert _check(tmp_path, link, capsys, image=True) == (0, "")
    assert not (tmp_path / "target.png").exists() and link.is_symlink()
    # a symlink to an existing file keeps the file as it was
    (tmp_path / "kept.csv").write_text("kept\n")
    (tmp_path / "to_kept.csv").symlink_to(tmp_path / "kept.csv")
    assert _check(tmp_path, tmp_path / "to_kept.csv", capsys) == (0, "")
    assert (tmp_path / "kept.csv").read_text() == "kept\n" and (tmp_path / "to_kept.csv").is_symlink()


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


def test_every_accepted_image_format_is_written(tmp_path):
    # each extension the checks accept is one savefig writes here, with no external program (pgf
    # runs LaTeX, and was accepted)
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from npu_ops_transformer_ext import _cli

    formats = _cli.image_formats()
    assert "pgf" not in formats and "png" in formats and "pgf" not in _cli.IMAGE_FORMATS
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([1, 2], [1, 3])
    ax.set_title("time ÷ limit")
    for ext in formats:
        fig.savefig(tmp_path / f"a.{ext}")
        assert (tmp_path / f"a.{ext}").stat().st_size > 0, ext
    plt.close(fig)


@pytest.mark.parametrize(("name", "message"), [
    ("b1noext", "has no extension to name its image format; end the name with one of ."),
    ("dot.", "has no extension to name its image format"),
    ("a.pgf", "'pgf' needs LaTeX; end the name with one of"),
])
def test_an_image_name_needs_an_extension_savefig_writes(name, message, tmp_path, capsys):
    # was: b1noext written as b1noext.png while "wrote b1noext" was printed; a.pgf failing after the run
    code, err = _check(tmp_path, tmp_path / name, capsys, image=True)
    assert code == 2 and f"--out {tmp_path / name}" in err and message in err and ".png" in err, err
    assert _check(tmp_path, tmp_path / "b.SVG", capsys, image=True) == (0, "")
    src = tmp_path / "b.csv"
    src.write_text("op,mode,provider,median_ms,x_copy\nrope_matrix,half,rope_matrix,0.1,1.0\n")
    for main, argv in ((plot.main, [str(src), "-o", str(tmp_path / name)]),
                       (sweep.main, ["--sizes", "16", "--csv", str(tmp_path / "s.csv"), "--plot", str(tmp_path / name)])):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in " ".join(capsys.readouterr().err.split())
    assert list(tmp_path.iterdir()) == [src]


def test_a_refused_option_creates_no_output_folder(tmp_path, monkeypatch, capsys):
    # the output checks create the outputs' folders, so they come after every other check (was:
    # sweep --sizes abc created bench_results/ before refusing)
    monkeypatch.chdir(tmp_path)
    for argv in (["--sizes", "abc"], ["--threads", "x"], ["--dtypes", "int8"], ["--min-time", "nan"]):
        with pytest.raises(SystemExit) as e:
            sweep.main(argv)
        assert e.value.code == 2, argv
    with pytest.raises(SystemExit) as e:
        sweep.main(["--summarize", "missing.csv", "--plot", "out/s.png"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        plot.main(["missing.csv", "-o", "out/b.png"])
    assert e.value.code == 2
    # nor a later output's refusal (was: --plot's folder created, then --csv refused)
    with pytest.raises(SystemExit) as e:
        sweep.main(["--plot", "nd1/deep/x.png", "--csv", str(tmp_path)])
    assert e.value.code == 2
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_plot_and_summarize_refuse_values_no_measurement_gives(tmp_path, capsys, value):
    # were: a matplotlib traceback (nan, inf) or an empty chart with exit 0 (0, -1) from plot, and
    # "nan (nan–nan)" or "-1.00" with exit 0 from sweep --summarize
    bench_csv = tmp_path / "b.csv"
    bench_csv.write_text(f"op,mode,provider,median_ms,x_copy\nrope_matrix,half,rope_matrix,0.1,{value}\n")
    sweep_csv = tmp_path / "s.csv"
    sweep_csv.write_text("S,x_bytes,threads,x_limit,dtype,layout,mode,provider\n"
                         f"256,1572864,2,{value},bfloat16,bnsd,half,rope_matrix\n")
    for main, argv, message in (
        (plot.main, [str(bench_csv), "-o", str(tmp_path / "b.png")],
         f"{bench_csv} line 2: x_copy = '{value}' is not a positive finite number"),
        (sweep.main, ["--summarize", str(sweep_csv), "--plot", ""],
         f"{sweep_csv} line 2: x_limit = '{value}' is not a positive finite number"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "b.png").exists()


def _trace(path, events=None):
    """A small Chrome trace in the twin's form: two cores, a pipe each, three instructions."""
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "AIC_0"}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "AIV_0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "PIPE_M"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "PIPE_V"}}]
    spans = [{"ph": "X", "name": "Mmad", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.0},
             {"ph": "X", "name": "Muls", "pid": 2, "tid": 1, "ts": 2.5, "dur": 1.0},
             {"ph": "X", "name": "Add", "pid": 2, "tid": 1, "ts": 4.0, "dur": 0.5}]
    path.write_text(json.dumps({"traceEvents": meta + spans if events is None else events}))
    return str(path)


def test_timeline_plot_draws_a_trace(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    trace = _trace(tmp_path / "t.json")
    for out, argv in ((tmp_path / "all.png", []), (tmp_path / "sub" / "zoom.svg", ["--window", "2,3", "--cores", "AIV_0"])):
        assert timeline_plot.main([trace, "--out", str(out), *argv]) == 0
        assert out.stat().st_size > 1000 and f"wrote {out}" in capsys.readouterr().out


def test_timeline_plot_default_title_names_the_cores_drawn(tmp_path, monkeypatch):
    # The default cores are AIC_0, AIV_0, AIV_1; a trace without AIV_1 draws two, and the title
    # named all three.
    matplotlib = pytest.importorskip("matplotlib")
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")  # text as text in the SVG
    trace = _trace(tmp_path / "t.json")
    out = tmp_path / "t.svg"
    assert timeline_plot.main([trace, "--out", str(out)]) == 0
    svg = out.read_text()
    assert "twin timeline: AIC_0, AIV_0<" in svg and "AIV_1" not in svg


def test_timeline_plot_options_that_cannot_work_exit_2(tmp_path, capsys):
    # was: tracebacks (a missing or non-JSON trace, unknown cores, a directory or a missing folder
    # as --out, an unknown extension) or a silent empty or broken image (--window nan/inf/reversed)
    trace = _trace(tmp_path / "t.json")
    not_json = tmp_path / "n.json"
    not_json.write_text("{nope")
    no_events = tmp_path / "e.json"
    no_events.write_text('{"other": []}')
    bad_event = _trace(tmp_path / "b.json", [{"ph": "M", "name": "process_name", "pid": 1}])
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    out = str(tmp_path / "o.png")
    for argv, message in (
        ([str(tmp_path / "missing.json")], f"cannot read {tmp_path / 'missing.json'}: No such file"),
        ([str(not_json)], f"{not_json} is not JSON ("),
        ([str(no_events)], f"{no_events} has no list of traceEvents; expected the Chrome trace JSON"),
        ([bad_event], f"{bad_event}: an event lacks a field or has one of the wrong type"),
        ([trace, "--cores", "AIV_9,AIC_7"], f"none of the cores AIV_9, AIC_7 is in {trace} (it has AIC_0, AIV_0)"),
        ([trace, "--cores", ","], "--cores: give at least one core name"),
        ([trace, "--cores", "AIV_0,FOO"], f"--cores: FOO is not in {trace} (it has AIC_0, AIV_0)"),
        ([trace, "--cores", "AIV_1,AIC_0,AIV_2"], f"--cores: AIV_1, AIV_2 are not in {trace} (it has AIC_0, AIV_0)"),
        ([trace, "--cores", "AIC_0,AIV_0,AIV_1"], f"--cores: AIV_1 is not in {trace} (it has AIC_0, AIV_0)"),
        ([trace, "--window", "nan,3"], "--window takes finite START < END in microseconds, got 'nan,3'"),
        ([trace, "--window", "1,inf"], "--window takes finite START < END in microseconds, got '1,inf'"),
        ([trace, "--window", "3,1"], "--window takes finite START < END in microseconds, got '3,1'"),
        ([trace, "--window", "1"], "--window takes START,END in microseconds, got '1'"),
        ([trace, "--window", "50,60"], f"no instruction of AIC_0, AIV_0, AIV_1 in {trace} between 50 and 60 us"),
        ([trace, "--out", str(tmp_path / "o.xyz")], "'xyz' is not an image format matplotlib writes"),
        ([trace, "--out", str(tmp_path / "noext")], "has no extension to name its image format"),
        ([trace, "--out", str(tmp_path)], f"--out {tmp_path} is a directory; give a file name"),
        ([trace, "--out", str(not_a_folder / "o.png")], f"cannot create its folder {not_a_folder}"),
    ):
        with pytest.raises(SystemExit) as e:
            timeline_plot.main([*argv, "--out", out] if "--out" not in argv else argv)
        assert e.value.code == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert message in err, (argv, err)
    assert not (tmp_path / "o.png").exists()


def test_timeline_plot_help_shows_defaults():
    r = subprocess.run([sys.executable, "-m", "npu_ops_transformer_ext.timeline_plot", "--help"],
                       capture_output=True, text=True, timeout=60, check=True)
    out = " ".join(r.stdout.split())
    for default in ("(default: those of AIC_0,AIV_0,AIV_1 the trace has)", "(default: timeline.png)",
                    "(default: the whole run)"):
        assert default in out
