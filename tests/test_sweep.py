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
        if r["provider"] == "limit":
            assert float(r["x_limit"]) == 1.0 and r["store"] in ("nontemporal", "temporal")
    out = capsys.readouterr().out
    assert "| S |" in out and "bfloat16 BNSD" in out
    # The spread over repeated runs, from their CSVs (here the same run twice: no spread).
    sweep.main(["--summarize", str(csv_path), str(csv_path), "--plot", ""])
    out = capsys.readouterr().out
    assert "2 runs" in out and "minimums" in out
    cell = out.split("| 256 | ")[1].split(" |")[0]
    med, rng = cell.split(" (")
    lo, hi = rng.rstrip(")").split("–")
    assert med == lo == hi
    pytest.importorskip("matplotlib")
    assert png.stat().st_size > 1000


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
