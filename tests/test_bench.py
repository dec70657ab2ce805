"""The benchmark CLI runs and writes the long-format CSV it documents (a smoke test, not a timing)."""
import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fresh_python import run_python
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
        # the host and the CPU kernel's per-CPU tuning it ran with, for comparing runs across hosts
        assert r["cpu"] and r["cpu_tuning"] == torch.ops.npu_ops_transformer_ext._cpu_tuning(torch.empty(0))
        if r["provider"] == "copy_":
            assert float(r["x_copy"]) == 1.0


def test_bench_figures_keep_significant_digits():
    # A tiny shape moves a few KB in milliseconds: its GB/s must not print as 0.
    assert bench._sig(16384 / 5.795e-3 / 1e9) == 0.002827
    assert bench._sig(1234.5678) == 1235.0
    assert bench._sig(1.2345, 3) == 1.23


def test_table_prints_times_with_significant_digits(tmp_path, capsys):
    # a tiny shape's times are microseconds: the table printed them as 0.00 ms
    assert [bench._fixed(v) for v in (1.94, 0.005795, 73.65, 1234.0, 12345.0, 0.0)] == [
        "1.940", "0.005795", "73.65", "1234", "12345", "0"]
    out = tmp_path / "t.csv"
    bench.main(["--shape", "1,1,4,8", "--modes", "half", "--providers", "rope_matrix,copy_", "--iters", "2",
                "--warmup", "0", "--csv", str(out), "--progress", "off"])
    rows = list(csv.DictReader(out.open()))
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("half")]
    assert len(lines) == len(rows) == 2
    for r, f in zip(rows, lines):
        assert f[1] == r["provider"]
        for printed, column in zip(f[2:5], ("median_ms", "p20_ms", "p80_ms")):
            assert float(printed) == float(r[column]) > 0, (printed, r)


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


def _decode_script():
    import importlib.util

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_decode.py"
    spec = importlib.util.spec_from_file_location("bench_decode", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "message"), [
    (["--calls", "0"], "--calls must be >= 1, got 0"),  # was: ZeroDivisionError
    (["--steps", "0"], "--steps must be >= 1, got 0"),  # was: ZeroDivisionError
    (["--calls", "-5"], "--calls must be >= 1, got -5"),
    (["--repeats", "-1"], "--repeats must be >= 1, got -1"),
    (["--heads", "0"], "--heads must be >= 1, got 0"),
    (["--start", "-1"], "--start must be >= 0, got -1"),
    (["--batches", "abc"], "--batches takes a comma list of positive integers B, got 'abc'"),
    (["--batches", ","], "--batches takes a comma list of positive integers B, got ','"),
    (["--batches", "1,0"], "--batches takes a comma list of positive integers B, got '1,0'"),
    (["--dim", "127"], "--dim must be an even number >= 2 (the half rotation turns pairs of elements), got 127"),
])
def test_decode_benchmark_refuses_options_that_cannot_run(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        _decode_script().main(argv)
    assert e.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_decode_benchmark_help_has_its_description_and_defaults():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_decode.py"
    out = " ".join(subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                                  timeout=120, check=True).stdout.split())
    assert ("costs matter more than memory traffic, against a single ``torch.mul`` of the same tensors. "
            "options:") in out  # the whole first paragraph (was cut after "the call's fixed")
    for default in ("(default: 32)", "(default: 128)", "(default: 1,8)", "(default: 5000)", "(default: 1)",
                    "(default: 2000)", "(default: 4096)"):
        assert default in out


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_row_loop_floor_builds_and_runs(tmp_path):
    src = Path(__file__).resolve().parent.parent / "benchmarks" / "row_loop_floor.cpp"
    exe = tmp_path / "row_loop_floor"
    subprocess.run(["g++", "-O2", "-march=native", "-fopenmp", "-o", str(exe), str(src)], check=True, timeout=300)
    bad = subprocess.run([str(exe), "16", "1", "5"], check=False, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "must divide 24" in bad.stderr
    out = subprocess.run([str(exe), "16", "2", "4", "5"], capture_output=True, text=True, timeout=60, check=True).stdout
    if "no AVX512_BF16" in out:
        pytest.skip("this CPU has no AVX512_BF16")
    lines = out.strip().splitlines()
    assert lines[0].startswith("x [1, 24, 16, 128] bf16") and "2 threads, bnsd 4 heads a batch, 5 rounds" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["memcpy", "bsnd", "bnsd", "bnsd-cp", "bnsd-t1"]
    copy_median = float(lines[1].split()[2])
    for line in lines[1:]:
        f = line.split()  # name, "median", us, "us", "(R.RRx", "memcpy)", "min", us, "us", "(R.RRx)"
        median, ratio, low = float(f[2]), float(f[4][1:-1]), float(f[7])
        assert 0 < low <= median and abs(ratio - median / copy_median) <= 0.01 + 0.06 * ratio


def test_help_lists_every_option_with_default_and_values(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m npu_ops_transformer_ext.bench")
    for opt in ("--shape", "--dtype", "--modes", "--providers", "--warmup", "--iters", "--threads",
                "--csv", "--progress"):
        assert opt in out
    for value in (*bench.MODES, *bench.PROVIDERS, "{bfloat16,float16,float32}", "{auto,on,off}",
                  "3d needs D = 128, half and interleave an even D, dense any D"):
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


def test_repeated_modes_are_timed_once(tmp_path):
    out = tmp_path / "m.csv"
    bench.main(["--shape", "1,1,4,8", "--modes", "half,dense,half", "--providers", "rope_matrix,clone",
                "--iters", "1", "--warmup", "0", "--csv", str(out), "--progress", "off"])
    rows = list(csv.DictReader(out.open()))
    assert [(r["mode"], r["provider"]) for r in rows] == [
        ("half", "rope_matrix"), ("half", "clone"), ("dense", "rope_matrix"), ("dense", "clone")]


def _fake_package(folder, build_rev):
    """A package named npu_ops_transformer_ext holding the real _cli.py, a version and a recorded
    build revision, in ``folder``."""
    from npu_ops_transformer_ext import _cli

    pkg = folder / "npu_ops_transformer_ext"
    pkg.mkdir(parents=True)
    shutil.copy(_cli.__file__, pkg / "_cli.py")
    (pkg / "__init__.py").write_text('__version__ = "0.0.0"\n')
    (pkg / "_build_info.py").write_text(f'GIT_REVISION = "{build_rev}"\n')


def _revision_seen_from(folder):
    code = "from npu_ops_transformer_ext import _cli; print(_cli.git_revision())"
    env = {"PYTHONPATH": str(folder), "PATH": os.environ.get("PATH", "")}
    return run_python(code, env=env).strip()


def test_git_revision_of_an_install_inside_a_checkout_is_its_build(tmp_path):
    """Imported from a checkout's python/ folder, the revision is the checkout's HEAD (+dirty);
    installed into an environment that lies inside the checkout, it is the wheel's recorded build
    revision, whatever the checkout has become since."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    _fake_package(repo / "python", "")
    _fake_package(repo / ".venv" / "site", "abc1234")
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=repo,
                                    capture_output=True, text=True, check=True).stdout.strip()
    git("init", "-q")
    (repo / ".gitignore").write_text(".venv/\n")
    git("add", "-A")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD")
    assert _revision_seen_from(repo / "python") == head
    assert _revision_seen_from(repo / ".venv" / "site") == "abc1234"
    (repo / ".gitignore").write_text(".venv/\n*.csv\n")  # a tracked file changed
    assert _revision_seen_from(repo / "python") == head + "+dirty"
    assert _revision_seen_from(repo / ".venv" / "site") == "abc1234"


def test_modes_are_built_for_the_head_dim_of_the_shape(tmp_path, capsys):
    # The mode matrices and tables follow --shape's D: half and interleave at any even D, dense at
    # any D (they were built for D = 128 whatever the shape).
    out = tmp_path / "d64.csv"
    bench.main(["--shape", "1,2,8,64", "--iters", "2", "--warmup", "0", "--modes", "half,interleave,dense",
                "--providers", "rope_matrix,eager_v1,eager_v3,clone", "--csv", str(out), "--progress", "off"])
    rows = list(csv.DictReader(out.open()))
    assert {(r["mode"], r["provider"]) for r in rows} == {
        (m, p) for m in ("half", "interleave", "dense") for p in ("rope_matrix", "eager_v1", "eager_v3", "clone")
    } - {("dense", "eager_v1")}
    for r in rows:
        assert r["shape"] == "1x2x8x64"
        assert float(r["p20_ms"]) <= float(r["median_ms"]) <= float(r["p80_ms"])
    bench.main(["--shape", "1,1,4,7", "--iters", "1", "--warmup", "0", "--modes", "dense",
                "--providers", "rope_matrix,eager_v3", "--csv", "", "--progress", "off"])
    assert "dense      rope_matrix" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--shape", "1,2,8,64", "--modes", "half,3d"],
     ("--modes 3d needs D = 128 (its split is 44+44+40), got D = 64 from --shape 1,2,8,64; at this D "
      "choose from half, interleave, dense")),
    (["--shape", "1,2,8,7", "--modes", "interleave"],
     ("--modes interleave needs an even D (its rotation turns pairs of elements), got D = 7 from --shape "
      "1,2,8,7; at this D choose from dense")),
    (["--threads", "-1"], "--threads must be >= 1, or 0 for torch's default, got -1"),
    (["--providers", ""], "--providers: give at least one of rope_matrix, "),
    (["--providers", ","], "--providers: give at least one of rope_matrix, "),
    (["--modes", ""], "--modes: give at least one of half, interleave, 3d, dense"),
    (["--modes", "dense", "--providers", "eager_v1,compile_v1"],
     "--providers eager_v1,compile_v1 time nothing for --modes dense"),
])
def test_options_that_cannot_run_are_refused_up_front(argv, message, capsys):
    # exit status 2 and a message naming the option, not a traceback (or an empty run) later
    args = ["--shape", "1,1,4,128", "--iters", "1", "--warmup", "0", "--modes", "half",
            "--providers", "rope_matrix", "--csv", "", "--progress", "off"]
    with pytest.raises(SystemExit) as e:
        bench.main(args + argv)  # a later option wins
    assert e.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_bench_mode_errors_exit_2_from_the_command_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "npu_ops_transformer_ext.bench", "--shape", "1,2,64,64",
                        "--modes", "3d", "--providers", "rope_matrix", "--csv", str(tmp_path / "b.csv")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--modes 3d needs D = 128" in r.stderr
    assert not (tmp_path / "b.csv").exists()


def test_csv_path_that_cannot_be_written_is_refused_up_front(tmp_path, capsys):
    # a directory, or a folder under a file: exit 2 naming --csv before anything is timed (was: the
    # whole run, then IsADirectoryError)
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    args = ["--shape", "1,1,2,4", "--modes", "half", "--providers", "rope_matrix", "--iters", "1", "--warmup", "0",
            "--progress", "off"]
    for path, message in (
        (tmp_path, f"--csv {tmp_path} is a directory; give a file name"),
        (not_a_folder / "b.csv",
         f"--csv {not_a_folder / 'b.csv'}: cannot create its folder {not_a_folder}: {not_a_folder} is not a directory"),
    ):
        with pytest.raises(SystemExit) as e:
            bench.main([*args, "--csv", str(path)])
        assert e.value.code == 2, path
        captured = capsys.readouterr()
        assert message in " ".join(captured.err.split()), path
        assert "rope_matrix benchmark" not in captured.out
    bench.main([*args, "--csv", str(tmp_path / "new" / "sub" / "b.csv")])  # a folder still to create is fine
    assert (tmp_path / "new" / "sub" / "b.csv").exists()
    # a folder the permission bits allow but the file system does not (/proc takes no new folders,
    # not even from root): still exit 2 before the run (was: the run, then an OSError from makedirs)
    if os.path.isdir("/proc/self"):
        capsys.readouterr()  # the run above
        with pytest.raises(SystemExit) as e:
            bench.main([*args, "--csv", "/proc/npu_ops_no_such_folder/b.csv"])
        assert e.value.code == 2
        captured = capsys.readouterr()
        assert "--csv /proc/npu_ops_no_such_folder/b.csv: cannot create its folder" in " ".join(captured.err.split())
        assert "rope_matrix benchmark" not in captured.out


def test_bench_table_grads_runs(capsys, monkeypatch):
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_table_grads.py"
    spec = importlib.util.spec_from_file_location("bench_table_grads", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "SHAPES", [(1, 2, 8, 16), (2, 3, 4, 32)])
    mod.main(["--repeat", "1", "--dtype", "float32"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(rows) == 2 and all(float(v) > 0 for r in rows for v in r[-3:])
    with pytest.raises(SystemExit) as e:
        mod.main(["--repeat", "0"])
    assert e.value.code == 2


def test_threads_above_the_process_are_refused(capsys):
    # as the sweep leaves them out: more threads than torch's default would time oversubscription
    above = torch.get_num_threads() + 1
    with pytest.raises(SystemExit) as e:
        bench.main(["--shape", "1,1,4,8", "--modes", "half", "--providers", "rope_matrix", "--threads",
                    str(above), "--csv", "", "--progress", "off"])
    assert e.value.code == 2
    assert (f"--threads {above} is above this process's {above - 1} (torch's default)"
            in " ".join(capsys.readouterr().err.split()))


def test_threads_are_given_back_after_a_run():
    # a run with --threads 1 left the process at 1 thread: a later --threads 2 was refused
    before = torch.get_num_threads()
    args = ["--shape", "1,1,4,8", "--modes", "half", "--providers", "rope_matrix", "--iters", "1", "--warmup", "0",
            "--csv", "", "--progress", "off"]
    bench.main([*args, "--threads", "1"])
    assert torch.get_num_threads() == before
    bench.main([*args, "--threads", str(before)])
    assert torch.get_num_threads() == before


def test_repeated_providers_run_once_and_columns_stay_apart(tmp_path, capsys):
    out = tmp_path / "b.csv"
    # a tiny shape: GB/s below 0.001 takes all of its 8 characters
    bench.main(["--shape", "1,1,4,8", "--modes", "half", "--providers", "rope_matrix,copy_,rope_matrix,clone,limit,copy_",
                "--iters", "1", "--warmup", "0", "--csv", str(out), "--progress", "off"])
    rows = list(csv.DictReader(out.open()))
    assert [r["provider"] for r in rows] == ["rope_matrix", "copy_", "clone", "limit"]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("half ")]
    assert len(lines) == 4
    for line, r in zip(lines, rows):
        fields = line.split()
        # mode, provider, median, p20, p80, GB/s, /clone, /copy_, /limit: nine fields, none run together
        assert len(fields) == 9, line
        assert float(fields[5]) == pytest.approx(float(r["gbps"]), rel=1e-2)
