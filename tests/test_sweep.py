"""The memory-limit copies (_stream_copy, _stream_copy_new) and the sweep CLI on a tiny grid (a few seconds)."""
import csv

import npu_ops_transformer_ext
import pytest
import torch
from npu_ops_transformer_ext import sweep

_copy = torch.ops.npu_ops_transformer_ext._stream_copy
_copy_new = torch.ops.npu_ops_transformer_ext._stream_copy_new


@pytest.mark.parametrize("nontemporal", [True, False])
@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 65, 1000, 64 * 1024 + 3, 3 * 64 * 1024 + 129, 5 << 20])
@pytest.mark.parametrize("offset", [0, 1, 17])
def test_stream_copy_copies_every_byte(nbytes, offset, nontemporal):
    # out starts at a byte offset, so its first streaming store is not at a cache-line boundary.
    g = torch.Generator().manual_seed(nbytes + offset)
    x = torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8)
    buf = torch.zeros(nbytes + offset + 64, dtype=torch.uint8)
    out = buf[offset:offset + nbytes]
    tables = [torch.randn(7, 5), torch.randn(3)]
    _copy([x], [out], tables, nontemporal)
    assert torch.equal(out, x)
    assert not buf[:offset].any() and not buf[offset + nbytes:].any()  # nothing written outside


def test_stream_copy_threads_and_dtypes():
    total = torch.get_num_threads()
    try:
        for threads in (1, total):
            torch.set_num_threads(threads)
            x = torch.randn(24, 700, 128).bfloat16()
            out = torch.empty_like(x)
            _copy([x], [out], [torch.randn(700, 128)])
            assert torch.equal(out, x)
    finally:
        torch.set_num_threads(total)


def test_stream_copy_several_in_one_call():
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(24, 300, 128, generator=g).half(), torch.randn(7, 33, generator=g)]
    outs = [torch.zeros_like(x) for x in xs]
    for nontemporal in (True, False):
        _copy(xs, outs, [torch.randn(300, 128)], nontemporal)
        assert all(torch.equal(o, x) for o, x in zip(outs, xs))
        for o in outs:
            o.zero_()


def test_stream_copy_rejects_bad_arguments():
    x = torch.randn(10)
    with pytest.raises(RuntimeError, match="as many bytes"):
        _copy([x], [torch.empty(9)], [])
    with pytest.raises(RuntimeError, match="contiguous"):
        _copy([torch.randn(4, 4).t()], [torch.empty(4, 4)], [])
    with pytest.raises(RuntimeError, match="one out per x"):
        _copy([x, x], [torch.empty(10)], [])


@pytest.mark.parametrize("nontemporal", [True, False])
@pytest.mark.parametrize("shape", [(3, 5, 7), (24, 700, 128), (2, 24, 512, 128)])  # the last: 6 MiB in bf16
def test_stream_copy_new_returns_copies(shape, nontemporal):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g).bfloat16()
    (first,) = _copy_new([x], [torch.randn(5)], nontemporal)
    assert first.shape == x.shape and first.dtype == x.dtype and first.is_contiguous()
    assert first.data_ptr() != x.data_ptr() and torch.equal(first, x)
    del first
    # A reused buffer (the output cache, from 256 KiB) is written whole: no old values show.
    y = torch.randn(shape, generator=g).bfloat16()
    assert torch.equal(_copy_new([y], [], nontemporal)[0], y)
    # Several x (q and k: rope_matrix_qk's limit), one of them not contiguous (copied in its
    # logical order), another of a different dtype and size.
    k = torch.randn(shape[:-1] + (shape[-1] + 3,), generator=g)
    outs = _copy_new([x.transpose(-1, -2), k], [y], nontemporal)
    assert len(outs) == 2 and torch.equal(outs[0], x.transpose(-1, -2)) and torch.equal(outs[1], k)


def test_limit_fn_moves_the_bytes():
    x = torch.randn(2, 3, 64, 128).half()
    fn = sweep.limit_fn(x, [torch.randn(64, 128)], calls=2)
    assert fn.store in ("nontemporal", "temporal")
    assert torch.equal(fn()[0], x)
    k = torch.randn(2, 1, 64, 128).half()
    both = sweep.limit_fn([x, k], [torch.randn(64, 128)], calls=2)()
    assert torch.equal(both[0], x) and torch.equal(both[1], k)
    assert sweep.limit_of("rope_matrix_qk") == "limit_qk" and sweep.limit_of("copy_") == "limit"
    # The bytes each provider moves (its GB/s): x read and written, q and k both for the fused call
    # and its limit, the tables once.
    tabs = [torch.randn(64, 128), torch.randn(64, 128).half()]
    one = 2 * x.numel() * 2 + 64 * 128 * (4 + 2)
    for p in ("rope_matrix", "limit", "copy_", "clone"):
        assert sweep.moved_bytes(p, x, tabs) == one, p
    for p in ("rope_matrix_qk", "limit_qk"):
        assert sweep.moved_bytes(p, x, tabs) == one + 2 * x.numel() * 2, p


def test_sweep_tiny_grid(tmp_path, capsys):
    csv_path, png = tmp_path / "s.csv", tmp_path / "s.png"
    sweep.main(["--sizes", "256,512", "--dtypes", "bfloat16,float32", "--modes", "half,3d",
                "--threads", "1,all", "--warmup", "1", "--iters", "3", "--min-time", "0", "--csv", str(csv_path),
                "--plot", str(png), "--quiet"])
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    threads = sorted({int(r["threads"]) for r in rows})
    assert threads == sorted({1, torch.get_num_threads()})
    provs = {r["provider"] for r in rows}
    assert provs == {"rope_matrix", "rope_matrix_qk", "limit", "limit_qk", "copy_"}
    cells = {(r["S"], r["dtype"], r["layout"], r["mode"], r["threads"]) for r in rows if r["provider"] == "rope_matrix"}
    assert len(cells) == 2 * 2 * 2 * 2 * len(threads)  # S x dtype x layout x mode x threads
    for r in rows:
        assert float(r["median_ms"]) > 0 and float(r["x_limit"]) > 0
        assert r["version"] == npu_ops_transformer_ext.__version__ and r["git"]
        assert r["cpu"] and r["cpu_tuning"] == torch.ops.npu_ops_transformer_ext._cpu_tuning(torch.empty(0))
        if r["provider"] == "limit":
            assert float(r["x_limit"]) == 1.0 and r["store"] in ("nontemporal", "temporal")
            # The streaming copy is the limit, or slower than the ordinary-store copy chosen.
            assert (float(r["x_limit_nt"]) == 1.0) == (r["store"] == "nontemporal"), r
        # The limit is the faster of both stores: no provider is further from the streaming copy.
        assert float(r["x_limit_nt"]) <= float(r["x_limit"]) * 1.001, r
    out = capsys.readouterr().out
    assert "| S |" in out and "bfloat16 BNSD" in out
    # The spread over repeated runs, from their CSVs (here the same run twice: no spread).
    sweep.main(["--summarize", str(csv_path), str(csv_path), "--plot", ""])
    out = capsys.readouterr().out
    assert "2 runs" in out and "minimums" in out and "streaming-store copy alone" in out
    cell = out.split("| 256 | ")[1].split(" |")[0]
    med, rng = cell.split(" (")
    lo, hi = rng.rstrip(")").split("–")
    assert med == lo == hi
    pytest.importorskip("matplotlib")
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("table_dtype", ["same", "float32"])
def test_sweep_gbps_counts_the_bytes_of_each_provider(tmp_path, table_dtype):
    # GB/s of every row is the bytes its call moves over its median time: x read and written (q and
    # k both for rope_matrix_qk and limit_qk), the two tables read once (limit_qk's was half that)
    csv_path = tmp_path / "g.csv"
    sweep.main(["--sizes", "16,48", "--dtypes", "bfloat16,float32", "--layouts", "bnsd,bsnd", "--modes", "half",
                "--threads", "1", "--heads", "2", "--dim", "64", "--table-dtype", table_dtype, "--warmup", "0",
                "--iters", "2", "--min-time", "0", "--csv", str(csv_path), "--plot", "", "--quiet"])
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert {r["provider"] for r in rows} == {"rope_matrix", "rope_matrix_qk", "limit", "limit_qk", "copy_"}
    for r in rows:
        s, elem = int(r["S"]), torch.finfo(getattr(torch, r["dtype"])).bits // 8
        table_elem = torch.finfo(getattr(torch, r["table_dtype"])).bits // 8
        assert int(r["x_bytes"]) == s * 2 * 64 * elem
        tensors = 2 if r["provider"] in ("rope_matrix_qk", "limit_qk") else 1
        moved = 2 * int(r["x_bytes"]) * tensors + 2 * s * 64 * table_elem
        assert float(r["gbps"]) == pytest.approx(moved / float(r["median_ms"]) / 1e6, rel=2e-3), r


def _plot_rows(sizes, dtypes, threads=(1,)):
    rows = []
    for s in sizes:
        for d in dtypes:
            for nt in threads:
                cell = {"S": s, "x_bytes": s * 24 * 128 * 2, "dtype": d, "threads": nt}
                for lay in ("bnsd", "bsnd"):
                    for m in ("half", "interleave", "3d"):
                        rows.append({**cell, "provider": "rope_matrix", "layout": lay, "mode": m, "x_limit": 1.2})
                rows.append({**cell, "provider": "rope_matrix_qk", "layout": "bnsd", "mode": "half", "x_limit": 1.1})
                for prov in ("copy_", "limit", "limit_qk"):
                    rows.append({**cell, "provider": prov, "layout": "", "mode": "", "x_limit": 1.0})
    return rows


@pytest.mark.parametrize(("sizes", "dtypes", "threads"), [
    ([256], ["bfloat16"], (1,)), ([256, 4096], ["bfloat16"], (1, 2)), ([512], sweep.DTYPES, (2,)),
])
def test_sweep_plot_legend_fits_and_every_point_is_inside_its_panel(sizes, dtypes, threads):
    # was: a 5-column legend wider than a one-dtype figure (entries cut off), and one size gave each
    # panel a degenerate x range
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    fig = sweep._draw(_plot_rows(sizes, dtypes, threads))
    fig.canvas.draw()
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels)) == 8  # 2 layouts x 3 modes, qk, copy_
    box, figure = legend.get_window_extent(), fig.bbox
    assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0
    panels = [ax.get_window_extent() for ax in fig.axes]
    assert box.y1 <= min(p.y0 for p in panels)  # below the panels
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        xs = [x for c in ax.containers for x in c.lines[0].get_xdata()]  # the errorbar lines
        assert xs and all(lo < x < hi for x in xs) and hi / lo >= 2.25 * 0.999
        assert {c.get_label() for c in ax.containers} <= set(labels)
    plt.close(fig)


def test_sweep_rejects_unknown_values():
    with pytest.raises(SystemExit):
        sweep.main(["--dtypes", "int8"])
    with pytest.raises(SystemExit):
        sweep.main(["--threads", "0"])


@pytest.mark.parametrize("timer", ["sweep", "bench"])
def test_round_robin_calls_each_provider_once_per_round_in_changing_order(timer):
    """A call pays for the dirty lines the call before it left, so the order changes every round."""
    from npu_ops_transformer_ext import bench

    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abcde"}
    rounds = 12
    if timer == "sweep":
        res = sweep._time_round_robin(fns, warmup=0, iters=rounds)
    else:
        res = bench._time_round_robin(fns, warmup=0, iters=rounds)
    assert set(res) == set(fns)
    timed = calls[len(calls) - 5 * rounds:]  # the sweep's timer first calls each once to size the run
    orders = [tuple(timed[i:i + 5]) for i in range(0, len(timed), 5)]
    assert len(orders) == rounds and all(sorted(o) == list("abcde") for o in orders)
    predecessors = {o[o.index("a") - 1] for o in orders if o.index("a") > 0}
    assert len(set(orders)) > 1 and len(predecessors) > 1


def _fake_clock(monkeypatch, durations):
    """Makes _cli's timer read a clock that only the providers advance: provider ``name``'s calls
    take ``durations[name]`` ms, one after the other (warmup and sizing calls included)."""
    from types import SimpleNamespace

    from npu_ops_transformer_ext import _cli

    now = [0.0]
    left = {name: list(ds) for name, ds in durations.items()}

    def call(name):
        now[0] += left[name].pop(0) / 1e3

    monkeypatch.setattr(_cli, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    return {name: (lambda name=name: call(name)) for name in durations}


@pytest.mark.parametrize("timer", ["sweep", "bench"])
def test_round_robin_percentiles_with_few_samples(timer, monkeypatch):
    """p20 <= median <= p80 for any number of rounds (below 5 both were the minimum, so p80 fell
    below the median)."""
    from npu_ops_transformer_ext import bench

    sizing = [100.0] if timer == "sweep" else []  # the sweep's timer first calls each once to size the run
    fns = _fake_clock(monkeypatch, {"a": sizing + [3.0, 1.0], "b": sizing + [2.0, 2.0]})
    if timer == "sweep":
        res = sweep._time_round_robin(fns, warmup=0, iters=2, min_time=0.0)
    else:
        res = bench._time_round_robin(fns, warmup=0, iters=2)
    assert res["a"][:3] == pytest.approx((2.0, 1.0, 3.0)) and res["b"][:3] == pytest.approx((2.0, 2.0, 2.0))
    if timer == "sweep":
        assert res["a"][3] == pytest.approx(1.0)  # the minimum


def test_quantile_is_monotone_and_matches_statistics_from_5_samples():
    import random
    import statistics

    from npu_ops_transformer_ext._cli import quantile

    assert quantile([7.0], 1, 5) == quantile([7.0], 4, 5) == 7.0
    assert (quantile([3.0, 1.0], 1, 5), quantile([3.0, 1.0], 4, 5)) == (1.0, 3.0)  # ranks 0.6, 2.4: clamped
    assert (quantile([1.0, 2.0, 4.0, 8.0], 1, 5), quantile([1.0, 2.0, 4.0, 8.0], 4, 5)) == (1.0, 8.0)  # ranks 1, 4
    assert quantile([1.0, 2.0, 4.0, 8.0, 16.0], 1, 5) == 1.2  # rank 1.2: 1 + 0.2 * (2 - 1)
    rng = random.Random(0)
    for n in range(1, 40):
        s = [rng.expovariate(1.0) for _ in range(n)]
        p20, p80 = quantile(s, 1, 5), quantile(s, 4, 5)
        assert min(s) <= p20 <= statistics.median(s) <= p80 <= max(s), n
        assert quantile(s, 1, 2) == pytest.approx(statistics.median(s))
        if n >= 5:  # the values the CSVs had from 5 samples on are unchanged
            q = statistics.quantiles(s, n=5)
            assert (p20, p80) == (q[0], q[3])
    with pytest.raises(ValueError):
        quantile([], 1, 5)


def test_sweep_half_and_interleave_at_another_dim(tmp_path):
    csv_path = tmp_path / "d64.csv"
    sweep.main(["--sizes", "64", "--dtypes", "bfloat16", "--layouts", "bnsd,bsnd", "--modes", "half,interleave",
                "--threads", "1", "--heads", "2", "--dim", "64", "--warmup", "0", "--iters", "2",
                "--min-time", "0", "--csv", str(csv_path), "--plot", "", "--quiet"])
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert {(r["layout"], r["mode"]) for r in rows if r["provider"] == "rope_matrix"} == {
        (lay, m) for lay in ("bnsd", "bsnd") for m in ("half", "interleave")}
    for r in rows:
        assert r["dim"] == "64" and r["heads"] == "2"
        assert float(r["p20_ms"]) <= float(r["median_ms"]) <= float(r["p80_ms"])


def test_sweep_repeated_values_are_taken_once(tmp_path, capsys):
    # a value given twice in a list times its cells once: no duplicate rows in the CSV; a thread
    # count above the process's is left out with a note
    csv_path = tmp_path / "d.csv"
    sweep.main(["--sizes", "16,32,16", "--dtypes", "bfloat16,bfloat16", "--layouts", "bnsd,bnsd", "--modes",
                "half,half", "--threads", "1,1,100000", "--heads", "1", "--dim", "64", "--warmup", "0", "--iters",
                "1", "--min-time", "0", "--csv", str(csv_path), "--plot", "", "--quiet", "--no-qk"])
    assert "note: --threads 100000 left out: above this process's" in capsys.readouterr().err
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    keys = [(r["S"], r["dtype"], r["layout"], r["mode"], r["threads"], r["provider"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * 3  # S = 16, 32 x rope_matrix, limit, copy_
    assert [r["S"] for r in rows if r["provider"] == "rope_matrix"] == ["16", "32"]


def _sweep_csv(path, rows=1):
    cols = ["S", "x_bytes", "dtype", "table_dtype", "layout", "mode", "threads", "provider", "median_ms",
            "x_limit", "x_limit_min"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for _ in range(rows):
            w.writerow([256, 1 << 20, "bfloat16", "bfloat16", "bnsd", "half", 1, "rope_matrix", 0.1, 1.5, 1.4])
    return str(path)


@pytest.mark.parametrize(("argv", "message"), [
    (["--dim", "64", "--modes", "half,3d"],
     "--modes 3d needs D = 128 (its split is 44+44+40), got --dim 64; at this D choose from half, interleave"),
    (["--dim", "63"], ("--modes half needs an even D (its rotation turns pairs of elements), got --dim 63; "
                       "use an even --dim")),
    (["--dim", "0"], "--dim must be >= 1, got 0"),
    (["--sizes", "abc"], "--sizes takes a comma list of positive integers S, got 'abc'"),
    (["--sizes", "-5"], "--sizes takes a comma list of positive integers S, got '-5'"),
    (["--sizes", "0"], "--sizes takes a comma list of positive integers S, got '0'"),
    (["--sizes", ""], "--sizes takes a comma list of positive integers S, got ''"),
    (["--threads", "abc"], "--threads: 'abc' is neither an integer nor 'all'"),
    (["--threads", "1,x"], "--threads: 'x' is neither an integer nor 'all'"),
    (["--threads", "1,0,-3,5"], "--threads: 0, -3 are not counts of threads (>= 1)"),  # was: 1 (and 5) only
    (["--threads", "0"], "--threads: 0 is not a count of threads (>= 1)"),
    (["--threads", "1.5"], "--threads: '1.5' is neither an integer nor 'all'"),
    (["--threads", "100000"], "--threads: no count up to this process's"),
    (["--heads", "0"], "--heads must be >= 1, got 0"),
    (["--iters", "0"], "--iters must be >= 1 and --warmup >= 0"),
    (["--min-time", "nan"], "--min-time must be a finite number of seconds >= 0, got nan"),
])
def test_sweep_options_that_cannot_run_are_refused(argv, message, tmp_path, capsys):
    # exit status 2 and a message naming the option, not a traceback from inside the run
    args = ["--sizes", "16", "--dtypes", "bfloat16", "--layouts", "bnsd", "--modes", "half", "--threads", "1",
            "--heads", "1", "--warmup", "0", "--iters", "1", "--min-time", "0",
            "--csv", str(tmp_path / "s.csv"), "--plot", "", "--quiet"]
    with pytest.raises(SystemExit) as e:
        sweep.main(args + argv)  # a later option wins
    assert e.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "s.csv").exists()


def test_summarize_refuses_what_is_not_a_sweep_csv(tmp_path, capsys):
    good = _sweep_csv(tmp_path / "good.csv")
    header_only = _sweep_csv(tmp_path / "header.csv", rows=0)
    bench_csv = tmp_path / "bench.csv"
    bench_csv.write_text("op,mode,provider,median_ms\nrope_matrix,half,rope_matrix,0.1\n")
    bad_value = tmp_path / "bad.csv"
    bad_value.write_text((tmp_path / "good.csv").read_text().replace(",1,rope_matrix,", ",one,rope_matrix,"))
    truncated = tmp_path / "truncated.csv"
    truncated.write_text((tmp_path / "good.csv").read_text() + "256,1048576,bfloat16,bfloat16,bnsd\n")
    for paths, message in (
        ([str(tmp_path / "missing.csv")], f"--summarize: cannot read {tmp_path / 'missing.csv'}: No such file"),
        ([good, header_only], f"--summarize: {header_only} has no rows; expected the CSV written by"),
        ([str(bench_csv)], f"--summarize: {bench_csv} has no column S, x_bytes, threads, x_limit, dtype, layout;"),
        ([str(bad_value)], f"--summarize: {bad_value} line 2: threads = 'one' is not a positive integer;"),
        ([str(truncated)], f"--summarize: {truncated} line 3: 5 fields where the header has 11; expected the CSV"),
    ):
        with pytest.raises(SystemExit) as e:
            sweep.main(["--summarize", *paths, "--plot", ""])
        assert e.value.code == 2
        assert message in " ".join(capsys.readouterr().err.split()), paths
    assert len(sweep.main(["--summarize", good, good, "--plot", ""])) == 2
    assert "2 runs" in capsys.readouterr().out


def test_summarize_refuses_the_options_of_a_run(tmp_path, capsys):
    # --summarize runs nothing: an option of a run (even an invalid one) was accepted and ignored
    good = _sweep_csv(tmp_path / "good.csv")
    for extra, named in ((["--sizes", "abc"], "--sizes"), (["--iters", "0", "--threads", "0"], "--threads, --iters"),
                         (["--csv", str(tmp_path / "x.csv"), "--quiet"], "--csv, --quiet"),
                         (["--no-qk"], "--no-qk")):
        with pytest.raises(SystemExit) as e:
            sweep.main(["--summarize", good, "--plot", "", *extra])
        assert e.value.code == 2, extra
        assert f"--summarize runs nothing, so {named} would be ignored; with it give only --plot" in " ".join(
            capsys.readouterr().err.split()), extra
    # an option given at its default value changes nothing, and is let through
    assert len(sweep.main(["--summarize", good, "--plot", "", "--iters", "10"])) == 1


def _rows_csv(path, cols, rows):
    base = {"S": 256, "x_bytes": 1 << 20, "dtype": "bfloat16", "table_dtype": "bfloat16", "layout": "bnsd",
            "mode": "half", "provider": "rope_matrix", "median_ms": 0.1}
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*base, "threads", *cols])
        w.writeheader()
        for r in rows:
            w.writerow({**base, **r})
    return str(path)


def test_summarize_runs_with_different_columns_and_thread_counts(tmp_path, capsys):
    # An older CSV without x_limit_nt beside a newer one with it, and thread counts that only one
    # of them has: each table counts the runs it comes from (was: a KeyError on x_limit_nt, the
    # thread counts of the first CSV only, and "2 runs" over cells of one)
    old = _rows_csv(tmp_path / "old.csv", ["x_limit", "x_limit_min"],
                    [{"threads": 1, "x_limit": 1.5, "x_limit_min": 1.4}])
    new = _rows_csv(tmp_path / "new.csv", ["x_limit", "x_limit_min", "x_limit_nt"],
                    [{"threads": 1, "x_limit": 1.7, "x_limit_min": 1.6, "x_limit_nt": 1.2},
                     {"threads": 2, "x_limit": 1.1, "x_limit_min": 1.0, "x_limit_nt": 0.9}])
    for paths in ([old, new], [new, old]):
        assert len(sweep.main(["--summarize", *paths, "--plot", ""])) == 2
        out = capsys.readouterr().out
        tables = {t.splitlines()[0]: t.splitlines()[-1] for t in out.strip().split("\n\n")}
        heads = [h.split(";")[0] for h in tables]
        assert heads == ["threads = 1, 2 runs", "threads = 1, 2 runs",
                         (f"threads = 1, time ÷ the streaming-store copy alone, medians: leaving out {old} "
                          "(no x_limit_nt column)"),
                         "threads = 2, 1 run", "threads = 2, 1 run", "threads = 2, 1 run"], out
        lines = list(tables.values())
        assert lines[0] == "| 256 | 1.60 (1.50–1.70) |" and lines[2] == "| 256 | 1.20 (1.20–1.20) |"
        assert lines[3] == "| 256 | 1.10 (1.10–1.10) |"


def test_sweep_output_paths_are_checked_before_the_run(tmp_path, capsys):
    # an image format matplotlib does not write, or a CSV path that is a directory or under a file,
    # is an option error (exit 2) before any cell runs (was: the whole sweep, then a traceback)
    args = ["--sizes", "16", "--dtypes", "bfloat16", "--layouts", "bnsd", "--modes", "half", "--threads", "1",
            "--heads", "1", "--warmup", "0", "--iters", "1", "--min-time", "0", "--quiet"]
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    for argv, message in (
        (["--csv", str(tmp_path / "s.csv"), "--plot", str(tmp_path / "x.xyz")],
         f"--plot {tmp_path / 'x.xyz'}: 'xyz' is not an image format matplotlib writes; end the name with one of"),
        (["--csv", str(tmp_path), "--plot", ""], f"--csv {tmp_path} is a directory; give a file name"),
        (["--csv", str(not_a_folder / "s.csv"), "--plot", ""],
         f"--csv {not_a_folder / 's.csv'}: cannot create its folder {not_a_folder}: {not_a_folder} is not a directory"),
        (["--csv", "", "--plot", ""], "--csv: give a file name"),
        (["--summarize", _sweep_csv(tmp_path / "good.csv"), "--plot", str(tmp_path / "x.xyz")],
         f"--plot {tmp_path / 'x.xyz'}: 'xyz' is not an image format"),
    ):
        with pytest.raises(SystemExit) as e:
            sweep.main(([] if "--summarize" in argv else args) + argv)  # --summarize takes only --plot
        assert e.value.code == 2, argv
        captured = capsys.readouterr()
        assert message in " ".join(captured.err.split()), argv
        assert captured.out == "", argv  # nothing ran, no table printed
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "x.xyz").exists()
