"""The twin's timing model: the scheduler on hand-made records with known answers, the recording of
real kernel launches (bytes, trace JSON) and the calibration against the seed's measured figures."""
import json
import os
import re

import pytest
import torch

twin = pytest.importorskip("npu_ops_transformer_ext.twin")
from npu_ops_transformer_ext import _twin, npu_model
from npu_ops_transformer_ext.reference import mode_matrix

PIPE_V, PIPE_MTE2, PIPE_MTE3 = 1, 4, 5
# 1 cycle = 1 ns, no launch overhead, no fixed costs: durations are bytes / rates exactly.
EXACT = {"clock_ghz": 1.0, "launch_us": 0.0, "vec_fixed_cycles": 0.0, "mte_latency_cycles": 0.0,
         "flag_latency_cycles": 0.0, "hbm_gbps": 1000.0, "l2_gbps": 1000.0}


def vec(ns, **kw):
    return {"pipe": PIPE_V, "kind": "vector", "ub_bytes": 256 * ns, **kw}


def load(nbytes, off=0, cap=100.0, region=0, **kw):
    return {"pipe": PIPE_MTE2, "kind": "mte", "cap": cap, "gm": [(region, False, off, nbytes)], **kw}


def sched(cores, increments=(), **params):
    return _twin.timing_schedule(cores, list(increments), {**EXACT, **params})


def test_independent_pipes_overlap():
    r = sched([{"name": "c", "ins": [vec(1000), load(100_000)]}])  # 1000 ns each, no dependency
    assert r["makespan_us"] == pytest.approx(1.0)
    assert r["cores"][0]["busy_us"] == {"PIPE_V": pytest.approx(1.0), "PIPE_MTE2": pytest.approx(1.0)}


def test_dependent_pipes_run_serially():
    # the load waits for the vector instruction (as a SetFlag<V_MTE2>/WaitFlag pair would order them)
    r = sched([{"name": "c", "ins": [vec(1000), load(100_000, deps={PIPE_V: 1})]}])
    assert r["makespan_us"] == pytest.approx(2.0)
    (_v0, v1), (m0, _m1) = [(s[2], s[3]) for s in sorted(r["spans_ns"], key=lambda s: s[1])]
    assert m0 == pytest.approx(v1)


def test_one_pipe_runs_in_order():
    r = sched([{"name": "c", "ins": [vec(300), vec(200), vec(500)]}])
    ends = sorted(s[3] for s in r["spans_ns"])
    assert ends == pytest.approx([300, 500, 1000])


def test_hbm_bandwidth_is_shared_by_all_cores():
    one = sched([{"name": "a", "ins": [load(100_000, cap=1000.0)]}], hbm_gbps=100.0)
    two = sched([{"name": "a", "ins": [load(100_000, cap=1000.0)]},
                 {"name": "b", "ins": [load(100_000, off=1 << 20, cap=1000.0)]}], hbm_gbps=100.0)
    assert one["makespan_us"] == pytest.approx(1.0)  # 100 KB at 100 B/ns
    assert two["makespan_us"] == pytest.approx(2.0)  # two of them share the 100 B/ns
    # a pipe's own cap binds before the shared bandwidth does
    capped = sched([{"name": "a", "ins": [load(100_000, cap=10.0)]},
                    {"name": "b", "ins": [load(100_000, off=1 << 20, cap=1000.0)]}], hbm_gbps=100.0)
    ends = sorted(c["end_us"] for c in capped["cores"])
    assert ends == pytest.approx([100_000 / 90 / 1000, 10.0])  # b gets the 90 B/ns a leaves


def test_cross_core_wait_holds_the_core_until_the_set_plus_latency():
    producer = {"name": "p", "ins": [vec(1000)], "sets": [(PIPE_V, 1, 0)]}
    consumer = {"name": "q", "ins": [vec(500, gate=1)], "waits": [(1, 0, 0)]}
    r = sched([producer, consumer], [(1, 0, [(0, 0)])], flag_latency_cycles=100.0)
    start = next(s for s in r["spans_ns"] if s[0] == 1)
    assert start[2] == pytest.approx(1100) and start[3] == pytest.approx(1600)
    # an increment that needs two sets (a mode-2 pair) waits for the later one
    p2 = {"name": "p2", "ins": [vec(3000)], "sets": [(PIPE_V, 1, 0)]}
    r = sched([producer, consumer, p2], [(1, 0, [(0, 0), (2, 0)])])
    assert next(s for s in r["spans_ns"] if s[0] == 1)[2] == pytest.approx(3000)


def test_l2_serves_a_second_read_of_the_same_bytes():
    r = sched([{"name": "c", "ins": [load(100_000, cap=1e6), load(100_000, cap=1e6)]}], hbm_gbps=100.0,
              l2_gbps=1000.0)
    b = r["bytes"]
    assert b["hbm_read"] == 100_000 and b["l2_read"] == 100_000
    assert r["makespan_us"] == pytest.approx(1.0 + 0.1)
    # ... unless L2 is too small to keep them
    r = sched([{"name": "c", "ins": [load(100_000, cap=1e6), load(100_000, off=1 << 20, cap=1e6),
                                     load(100_000, cap=1e6)]}], hbm_gbps=100.0, l2_bytes=150_000.0)
    assert r["bytes"]["hbm_read"] == 300_000


@pytest.mark.parametrize("nbytes", [10_000, 100_000, 1_000_000])
def test_more_bytes_are_never_faster(nbytes):
    base = sched([{"name": "c", "ins": [vec(100), load(nbytes), vec(100, deps={PIPE_MTE2: 1})]}])
    more = sched([{"name": "c", "ins": [vec(100), load(nbytes + 4096), vec(100, deps={PIPE_MTE2: 1})]}])
    assert more["makespan_us"] >= base["makespan_us"]


def _inputs(s, mode="half", b=1, n=4, d=128, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(s)
    x = torch.randn(b, n, s, d, generator=g).to(dtype)
    sin = torch.randn(1, 1, s, d, generator=g).to(dtype)
    cos = torch.randn(1, 1, s, d, generator=g).to(dtype)
    y = mode_matrix(mode, [d]) if mode else (torch.randn(d, d, generator=g) / d**0.5).to(dtype)
    return x, y, sin, cos


@pytest.mark.parametrize("kernel", ["perm", "mix"])
def test_timeline_accounts_for_every_gm_byte_and_leaves_the_result_unchanged(kernel):
    args = _inputs(300)
    out0, _ = twin.run(*args, kernel=kernel)
    out, rep = twin.run(*args, kernel=kernel, timeline=True)
    assert torch.equal(out, out0)
    t = rep["timeline"]
    reads = sum(c["gm_read_bytes"] for c in rep["cores"])
    writes = sum(c["gm_write_bytes"] for c in rep["cores"])
    assert t["bytes"]["hbm_read"] + t["bytes"]["l2_read"] == reads
    assert t["bytes"]["hbm_write"] + t["bytes"]["l2_write"] == writes
    assert t["predicted_us"] == pytest.approx(t["launch_us"] + t["makespan_us"])
    assert t["makespan_us"] == pytest.approx(max(c["end_us"] for c in t["cores"]))
    assert [c["name"] for c in t["cores"]] == [c["name"] for c in rep["cores"]]
    for c in t["cores"]:
        assert all(0 < v <= t["makespan_us"] + 1e-9 for v in c["busy_us"].values())


@pytest.mark.parametrize("s", [1, 41, 300])
def test_original_schedule_kernel_is_exact_and_clean(s):
    # The calibration kernel computes what the CPU op does (bit-exact for a signed permutation)
    # under every sanitizer rule, from a workspace as large as x and one flag per cube core.
    args = _inputs(s, n=3)
    out, rep = twin._run(*args, soc="Ascend910B3", variant="test_only_original_schedule")
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(*args))
    assert rep["workspace_bytes"] == _twin.SYS_WORKSPACE_BYTES + args[0].numel() * 2
    assert all(c["flags_set"] == 1 and c["flags_waited"] == 0 for c in rep["cores"] if c["type"] == "AIC")
    assert all(c["flags_set"] == 0 and c["flags_waited"] == 1 for c in rep["cores"] if c["type"] == "AIV")


@pytest.mark.parametrize(
    "mode,sections,dtype,path",
    [("half", [128], torch.bfloat16, "copies"), ("quarter", [128], torch.bfloat16, "copies"),
     ("half", [64, 64], torch.bfloat16, "copies"), ("half", [32, 32, 64], torch.bfloat16, "copies"),
     ("half", [128], torch.float32, "copies"),
     ("interleave", [128], torch.bfloat16, "swap"), ("interleave", [64, 64], torch.float16, "swap"),
     ("interleave", [44, 44, 40], torch.bfloat16, "swap"),
     ("interleave", [128], torch.float32, "gather"), ("half", [44, 44, 40], torch.float32, "gather"),
     ("half", [44, 44, 40], torch.bfloat16, "words"), ("half", [44, 44, 40], torch.float16, "words")],
)
def test_perm_kernel_finds_partners_by_the_path_the_host_chose(tmp_path, mode, sections, dtype, path):
    # Runs of columns whose partners lie the same distance away, 8-column aligned, move with one
    # strided UB copy each; interleaved pairs of a 2-byte x by swapping the 16-bit halves of each
    # 32-bit word; columns of a 2-byte x that move in pairs (44-column halves) by a Gather of 32-bit
    # words; anything else (fp32 pairs, fp32 44-column halves) keeps the fp32 Gather. All exact.
    d = sum(sections)
    x, _, sin, cos = _inputs(50, d=d, dtype=dtype)
    y = mode_matrix(mode, sections, dtype=dtype)
    trace = tmp_path / "t.json"
    out, rep = twin.run(x, y, sin, cos, kernel="perm", timeline=True, trace=str(trace))
    assert rep["kernel_kind"] == "perm"
    assert rep["tiling"]["partnerPath"] == {"gather": 0, "copies": 1, "swap": 2, "words": 3}[path]
    assert torch.equal(out, torch.ops.npu_ops_transformer_ext.rope_matrix(x, y, sin, cos))
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert ("Gather" in names) == (path in ("gather", "words"))
    assert ("DataCopy(UB->UB, params)" in names) == (path == "copies")
    swap_ops = {"ShiftLeft", "ShiftRight", "Or"}
    assert (names & swap_ops) == (swap_ops if path == "swap" else set())


def test_timeline_grows_with_the_work_and_shrinks_with_bandwidth():
    small = twin.run(*_inputs(400), kernel="perm", timeline=True)[1]["timeline"]["makespan_us"]
    large = twin.run(*_inputs(1600), kernel="perm", timeline=True)[1]["timeline"]["makespan_us"]
    assert large > small
    slow = twin.run(*_inputs(1600), kernel="perm", timeline=True, timing_params={"hbm_gbps": 200.0})[1]
    assert slow["timeline"]["makespan_us"] > large


def test_chrome_trace_is_well_formed(tmp_path):
    path = tmp_path / "trace.json"
    _, rep = twin.run(*_inputs(200, mode=None), kernel="mix", timeline=True, trace=str(path))
    t = rep["timeline"]
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names.values()) == sorted(c["name"] for c in t["cores"])
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] in names for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(t["makespan_us"], rel=1e-3)
    # per core and pipe the busy time is the sum of its spans
    busy = {}
    for e in spans:
        key = (names[e["pid"]], e["tid"])
        busy[key] = busy.get(key, 0.0) + e["dur"]
    aic = next(c for c in t["cores"] if c["name"] == "AIC_0")
    assert busy[("AIC_0", 2)] == pytest.approx(aic["busy_us"]["PIPE_M"], rel=1e-3)
    with pytest.raises(ValueError, match="timeline"):
        twin.run(*_inputs(16), trace=str(path))


def test_unknown_timing_parameter_is_refused():
    with pytest.raises(ValueError, match="unknown timing parameter 'no_such'; known: clock_ghz, "):
        twin.run(*_inputs(16), timeline=True, timing_params={"no_such": 1.0})
    assert set(twin.timing_params()) >= {"hbm_gbps", "clock_ghz", "matmul_fixed_cycles", "flag_latency_cycles"}


def test_calibration_within_20_percent_at_the_seed_shape():
    # The twin runs the seed shape [1, 24, 28800, 128] in seconds, so the calibration is checked
    # on the anchors themselves (docs/kernel.md, "Calibration").
    for row in npu_model.calibration():
        assert abs(row["error"]) <= 0.20, row


def test_npu_model_cli_prints_every_mode_and_kernel(capsys):
    rows = npu_model.main(["--shape", "1,2,64,128", "--modes", "half-3d,dense"])
    assert [(r["mode"], r["kernel"]) for r in rows] == [("half-3d", "perm"), ("half-3d", "mix"), ("dense", "mix")]
    out = capsys.readouterr().out
    assert "half-3d" in out and "dense" in out and "predicted" in out
    # the model's matrices take precision's splits, also for D != 128 (3D at D = 64: 22+22+20)
    _, y, _, _ = npu_model._inputs((1, 1, 8, 64), torch.float32, "half-3d")
    assert torch.equal(y, mode_matrix("half", [22, 22, 20], dtype=torch.float32))


def test_word_gather_keeps_half_3d_at_the_copies_time():
    # Half 3D (44+44+40) in bf16 gathers 32-bit words (half the elements of an fp32 Gather at
    # A2's 5 elements per cycle), so the vector pipe stays under the copies and the prediction
    # matches half 1D's, whose partners move by UB copies; the fp32 Gather was about 10 % slower.
    shape = (1, 24, 2880, 128)
    half1d = npu_model.predict(shape, "half-1d", "perm")
    half3d = npu_model.predict(shape, "half-3d", "perm")
    assert half3d["predicted_us"] <= 1.02 * half1d["predicted_us"]
    slow = npu_model.predict(shape, "half-3d", "perm", timing_params={"gather_elems_per_cycle": 2.5})
    assert slow["predicted_us"] > 1.05 * half1d["predicted_us"]  # a Gather of twice the work would show


@pytest.mark.parametrize(("dtype", "d"), [("bfloat16", 4690), ("float32", 3914)])
def test_npu_model_shows_a_dash_where_only_mix_serves_the_head_dim(dtype, d, capsys):
    # D above the perm kernel's UB limit but within MIX's: "-" in the perm column, as for dense,
    # and the MIX figure (was: the perm tiling's ValueError, exit 1)
    rows = npu_model.main(["--shape", f"1,1,2,{d}", "--dtype", dtype, "--modes", "half-1d,dense"])
    assert [(r["mode"], r["kernel"]) for r in rows] == [("half-1d", "mix"), ("dense", "mix")]
    lines = capsys.readouterr().out.splitlines()
    half = next(v for v in lines if v.startswith("half-1d")).split()
    assert half[1] == "-" and float(half[2]) > 0
    assert any(v.startswith("perm -: the vector-only kernel does not serve this shape") for v in lines)


def test_npu_model_limits_match_the_tilings():
    for dtype, d_max in npu_model.D_MAX.items():
        twin.tiling(1, 2, 1, d_max, x_dtype=dtype, table_dtype=dtype)
        with pytest.raises(ValueError, match=f"largest D served with these dtypes is {d_max}"):
            twin.tiling(1, 2, 1, d_max + 2, x_dtype=dtype, table_dtype=dtype)
    with pytest.raises(ValueError, match="below the minimum 16"):
        twin.tiling(1, 2, 1, npu_model.D_MIN - 2)


@pytest.mark.parametrize(("argv", "message"), [
    (["--shape", "1,2,16,8"], ("--shape 1,2,16,8: the NPU kernels serve 16 <= D <= 5216 for --dtype bfloat16 "
                               "(the largest D: bfloat16 5216, float16 5216, float32 3920), got D = 8")),
    (["--shape", "1,1,2,5218"], "--shape 1,1,2,5218: the NPU kernels serve 16 <= D <= 5216 for --dtype bfloat16"),
    (["--shape", "1,1,2,3922", "--dtype", "float32"],
     "--shape 1,1,2,3922: the NPU kernels serve 16 <= D <= 3920 for --dtype float32"),
    (["--soc", "Foo"], "--soc 'Foo' is not a SoC the twin knows; choose from Ascend910B1, Ascend910B2, Ascend910B3"),
    (["--shape", "1,2,16,17", "--modes", "dense,half-1d"],
     ("--modes half-1d needs an even D (its rotation turns pairs of elements), got D = 17 from --shape 1,2,16,17; "
      "at this D choose from dense")),
    (["--modes", ","], "--modes: give at least one of half-1d, half-2d, half-3d, interleave-1d"),
])
def test_npu_model_options_that_cannot_run_are_refused_up_front(argv, message, capsys):
    # exit status 2 and a message naming the option and its limits, before the twin runs (was: a
    # traceback with exit 1, or an empty table)
    from npu_ops_transformer_ext import bench

    with pytest.raises(SystemExit) as e:
        bench.main(["--npu-model", "--shape", "1,1,2,16", "--modes", "half-1d", *argv])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert message in " ".join(captured.err.split())
    assert captured.out == ""


def test_npu_model_module_runs_as_a_command():
    """``python -m npu_ops_transformer_ext.npu_model --help`` prints the same usage as
    ``bench --npu-model --help`` (it printed nothing: the module had no entry point)."""
    import subprocess
    import sys

    outs = [subprocess.run([sys.executable, "-m", f"npu_ops_transformer_ext.{m}", *extra, "--help"], capture_output=True,
                           text=True, timeout=120, check=True).stdout
            for m, extra in (("npu_model", []), ("bench", ["--npu-model"]))]
    assert "--shape" in outs[0] and outs[0] == outs[1]


@pytest.mark.parametrize(("params", "error", "message"), [
    ({"l2_line": 0}, ValueError, "l2_line must be a whole number of bytes >= 1, got 0.0"),  # was SIGFPE
    ({"l2_line": 0.5}, ValueError, "l2_line must be a whole number of bytes >= 1, got 0.5"),
    ({"launch_us": -100}, ValueError, "launch_us must be a finite number >= 0, got -100.0"),  # a negative time
    ({"launch_us": float("nan")}, ValueError, "launch_us must be a finite number >= 0, got nan"),
    ({"hbm_gbps": float("nan")}, ValueError, "hbm_gbps must be a finite number > 0, got nan"),  # was inf
    ({"hbm_gbps": 0}, ValueError, "hbm_gbps must be a finite number > 0, got 0.0"),  # was a 'stalled' error
    ({"clock_ghz": -1}, ValueError, "clock_ghz must be a finite number > 0, got -1.0"),
    ({"flag_latency_cycles": -1e9}, ValueError, "flag_latency_cycles must be a finite number >= 0"),
    ({"hbm_gbps": "fast"}, TypeError, "timing parameter hbm_gbps must be a number, got str 'fast'"),
    ({"hbm_gbps": True}, TypeError, "timing parameter hbm_gbps must be a number, got bool True"),
])
def test_timing_parameters_the_model_cannot_use_are_refused(params, error, message):
    with pytest.raises(error, match=re.escape(message)):
        twin.run(*_inputs(16), timeline=True, timing_params=params)


def test_options_are_checked_for_an_empty_x_too(tmp_path):
    x, y, sin, cos = _inputs(16)
    empty = x[..., :0, :]
    out, report = twin.run(empty, y, sin[..., :0, :], cos[..., :0, :], timeline=True, trace=str(tmp_path / "t.json"))
    assert out.shape == empty.shape and report == {} and not (tmp_path / "t.json").exists()
    with pytest.raises(ValueError, match="soc must be one of"):
        twin.run(empty, y, sin[..., :0, :], cos[..., :0, :], soc="NoSuchSoC")
    with pytest.raises(ValueError, match="l2_line"):
        twin.run(empty, y, sin[..., :0, :], cos[..., :0, :], timeline=True, timing_params={"l2_line": 0})
    with pytest.raises(ValueError, match="timing_params= needs timeline=True"):
        twin.run(x, y, sin, cos, timing_params={"hbm_gbps": 1000})


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"max_block_dim": 2.5}, TypeError, "max_block_dim must be an int (0 = as many cores as the tiling wants), got float 2.5"),
    ({"max_block_dim": True}, TypeError, "max_block_dim must be an int (0 = as many cores as the tiling wants), got bool True"),
    ({"max_block_dim": -1}, ValueError, "max_block_dim must be from 0 to 2**32 - 1 (0 = as many cores as the tiling wants), got -1"),
    ({"max_block_dim": 2**32}, ValueError, "tiling wants), got 4294967296"),
    ({"timeline": True, "trace": 5}, TypeError, "trace must be a file name (str or os.PathLike) or None, got int"),
    ({"timeline": True, "trace": ""}, ValueError, "trace: give a file name (or None for no trace)"),  # was no trace
    ({"timeline": True, "trace": "t\0.json"}, ValueError, "trace 't\\x00.json': a file name cannot hold a NUL"),
])
def test_run_options_are_checked_before_the_run(monkeypatch, kwargs, error, message):
    """Each was a pybind signature dump (max_block_dim) or an error after the simulation (trace)."""
    monkeypatch.setattr(twin, "_run", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(error, match=re.escape(message)):
        twin.run(*_inputs(16), **kwargs)
    if "max_block_dim" in kwargs:
        for fn in (twin.tiling, twin.perm_tiling):
            with pytest.raises(error, match=re.escape(message)):
                fn(1, 16, 4, 128, **kwargs)


def test_an_unwritable_trace_is_refused_before_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(twin, "_run", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(ValueError, match=re.escape(f"trace {tmp_path} is a directory; give a file name")):
        twin.run(*_inputs(16), timeline=True, trace=str(tmp_path))
    not_a_folder = tmp_path / "f"
    not_a_folder.write_text("")
    with pytest.raises(ValueError, match=re.escape(f"cannot create its folder {not_a_folder}")):
        twin.run(*_inputs(16), timeline=True, trace=not_a_folder / "t.json")


def test_run_takes_a_path_object_for_the_trace_and_a_numpy_block_dim(tmp_path):
    import numpy as np
    trace = tmp_path / "new" / "t.json"
    args = _inputs(16)
    out, report = twin.run(*args, timeline=True, trace=trace, max_block_dim=np.int64(2))
    assert report["block_dim"] <= 2 and json.loads(trace.read_text())["traceEvents"]
    assert torch.equal(out, twin.run(*args, max_block_dim=2)[0])
    # a file name that is not UTF-8 (as os.fsdecode gives it) is written as it is (was pybind's
    # signature dump)
    odd = tmp_path / os.fsdecode(b"t-\xff.json")
    twin.run(*args, timeline=True, trace=odd)
    assert json.loads(odd.read_text())["traceEvents"]


def test_npu_model_prints_small_predictions_to_four_significant_digits(capsys):
    # A few-microsecond prediction printed as 0.005 ms told half-1d and dense apart by nothing.
    rows = npu_model.main(["--shape", "1,1,2,128", "--modes", "half-1d,dense"])
    lines = capsys.readouterr().out.splitlines()
    for r in rows:
        line = next(v for v in lines if v.startswith(r["mode"])).split()
        shown = float(line[1 if r["kernel"] == "perm" else 2])
        assert r["predicted_ms"] < 0.1 and shown == pytest.approx(r["predicted_ms"], rel=1e-3)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"outer": -1}, ValueError, "outer must be from 0 to 2**64 - 1, got -1"),
    ({"s": 1.5}, TypeError, "s must be an int, got float 1.5"),
    ({"d": True}, TypeError, "d must be an int, got bool True"),  # was taken as D = 1
    ({"soc": 910}, TypeError, "soc must be a str, got int 910"),
    ({"x_dtype": torch.bfloat16}, TypeError, "x_dtype must be a str, got dtype torch.bfloat16"),
    # was taken as x's dtype (2-byte tables)
    ({"table_dtype": "float64"}, ValueError, "table_dtype must be x_dtype ('bfloat16') or 'float32'"),
])
@pytest.mark.parametrize("fn", ["tiling", "perm_tiling"])
def test_tiling_arguments_are_checked_by_name(fn, kwargs, error, message):
    args = {"outer": 1, "s": 16, "inner": 4, "d": 128}
    args.update({k: v for k, v in kwargs.items() if k in args})
    options = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(error, match=re.escape(message)):
        getattr(twin, fn)(*args.values(), **options)
    assert getattr(twin, fn)(1, 16, 4, 128)["aivNum"] > 0
