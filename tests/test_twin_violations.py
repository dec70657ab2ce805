"""The twin stops every misuse class with exactly the expected rule (and never hangs).

Kernel misuse comes from TEST-ONLY broken kernels compiled into the twin module only
(twin/test_kernels/broken_kernels.cpp); tiling misuse from the production kernel run with a
deliberately broken tiling (the original operator's split, an oversized UB chunk).
"""

from __future__ import annotations

import time

import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix

twin = pytest.importorskip("npu_ops_transformer_ext.twin")


def _inputs(b=1, n=3, s=41, d=128, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, n, s, d, generator=g).to(dtype)
    y = mode_matrix("half", [d], dtype=dtype)
    sin = torch.randn(s, d, generator=g).to(dtype)
    cos = torch.randn(s, d, generator=g).to(dtype)
    return x, y, sin, cos


KERNEL_VARIANTS = [
    ("test_only_vector_op_on_cube", "cube-core-vector-op", "AIC_"),
    ("test_only_datacopy_unaligned_length", "datacopy-align", "AIV_"),
    ("test_only_ub_unaligned_address", "ub-align", "AIV_"),
    ("test_only_cast_none_to_bf16", "cast-illegal", "AIV_"),
    ("test_only_shift_out_of_range", "vector-shift", "AIV_"),
    ("test_only_deque_empty", "que-deque-empty", "AIV_"),
    ("test_only_alloc_past_depth", "que-alloc-exhausted", "AIV_"),
    ("test_only_use_after_free", "use-after-free", "AIV_"),
    ("test_only_flag_overflow", "flag-counter-overflow", "AIC_"),
    ("test_only_deadlock", "deadlock", "all cores"),
    ("test_only_flag_unbalanced", "flag-unbalanced", "AIV_"),
    ("test_only_mode2_one_vector_sets_twice", "deadlock", "all cores"),
    ("test_only_flag_15_reserved", "flag-id", "AIC_"),
    ("test_only_wait_syncall_flag", "flag-id", "AIV_"),
    ("test_only_event_id_reserved", "event-id", "AIV_"),
    ("test_only_gather_alias", "gather-alias", "AIV_"),
    ("test_only_gm_unaligned", "gm-align", "AIV_"),
    ("test_only_default_local_tensor", "ub-invalid-tensor", "AIV_"),
    ("test_only_alloc_without_tpipe", "no-tpipe", "AIV_"),
    ("test_only_event_double_set", "event-double-set", "AIV_"),
    ("test_only_event_wait_unset", "event-wait-unset", "AIV_"),
    ("test_only_pipe_barrier_s", "pipe-barrier", "AIV_"),
    ("test_only_crosscore_set_on_pipe_s", "flag-pipe", "AIC_"),
    ("test_only_crosscore_set_on_fix_from_vector", "flag-pipe", "AIV_"),
    ("test_only_event_v_m_on_vector", "event-core", "AIV_"),
    ("test_only_event_mte1_v_on_cube", "event-core", "AIC_"),
    ("test_only_pipe_barrier_m_on_vector", "event-core", "AIV_"),
    ("test_only_two_tpipes", "tpipe-multiple", "AIV_"),
    ("test_only_alloc_before_init", "que-uninit", "AIV_"),
    ("test_only_free_into_other_queue", "que-foreign-tensor", "AIV_"),
    ("test_only_vector_count_negative", "vector-count", "AIV_"),
    ("test_only_vector_partial_overlap", "vector-overlap", "AIV_"),
    ("test_only_ub_on_cube", "cube-core-ub", "AIC_"),
    ("test_only_datacopy_block_count", "datacopy-range", "AIV_"),
    ("test_only_datacopy_into_vecalc", "datacopy-position", "AIV_"),
    ("test_only_uninitialized_workspace_read", "uninitialized-read", "AIV_"),
    ("test_only_flag_pipe_mismatch", "flag-pipe-mismatch", "AIV_"),
    ("test_only_pipe_race_tbuf_read", "pipe-race", "AIV_"),
    ("test_only_pipe_race_overwrite_after_copy_out", "pipe-race", "AIV_"),
    ("test_only_ub_uninitialized_reaches_gm", "uninitialized-read", "AIV_"),
    ("test_only_mte2_overlapping_dst", "same-pipe-overlap", "AIV_"),
    ("test_only_mte3_overlapping_dst", "same-pipe-overlap", "AIV_"),
    ("test_only_datacopy_params_block_count", "datacopy-range", "AIV_"),
    ("test_only_datacopy_ext_block_len", "datacopy-range", "AIV_"),
    ("test_only_datacopy_pad_too_wide", "datacopy-range", "AIV_"),
    ("test_only_workspace_offset_twice", "workspace-offset", "AIV_"),
    ("test_only_matmul_without_mte2_mte1_wait", "pipe-race", "AIC_"),
    ("test_only_matmul_without_mte1_m_wait", "pipe-race", "AIC_"),
    ("test_only_matmul_without_m_fix_wait", "pipe-race", "AIC_"),
    ("test_only_matmul_regist_after_init_buffer", "matmul-regist-order", "AIV_"),
    ("test_only_matmul_transposed_a_undeclared", "matmul-trans", "AIC_"),
    ("test_only_matmul_used_cores_over_soc", "matmul-tiling", "AIC_"),
]

# Test-only kernels launched as vector-only (AIV_ONLY) kernels, with the perm kernel's plan.
AIV_ONLY_VARIANTS = [
    ("test_only_crosscore_in_aiv_only", "crosscore-kernel-type", "AIV_"),
]

# The pipe-race and same-pipe-overlap kernels with their synchronisation added: they must pass (test_twin_pipes.py).
SYNCED_VARIANTS = [
    "test_only_synced_tbuf_read",
    "test_only_synced_overwrite_after_copy_out",
    "test_only_synced_mte2_overlapping_dst",
    "test_only_synced_mte3_overlapping_dst",
    "test_only_core_events_pass",
]

# Test-only kernels that break nothing and report what they observe.
PROBE_VARIANTS = ["test_only_probe_workspace_argument"]
# The original operator's schedule, the timing model's calibration kernel: it must pass
# (test_twin_timing.py).
CALIBRATION_VARIANTS = ["test_only_original_schedule"]


def test_every_test_only_variant_is_covered():
    assert sorted(twin._twin.test_only_variants()) == sorted(
        [v for v, _, _ in KERNEL_VARIANTS + AIV_ONLY_VARIANTS] + SYNCED_VARIANTS + PROBE_VARIANTS + CALIBRATION_VARIANTS
    )


def test_kernel_receives_the_user_workspace_as_the_generated_wrapper_passes_it():
    # ascendc_library's wrapper (HAVE_WORKSPACE) sets the system workspace to the workspace argument
    # and calls the kernel with GetUserWorkspace of it: 16 MiB further. The probe writes out[0] = 1.0
    # when that is what it received, 0.0 otherwise.
    x, y, sin, cos = _inputs()
    out, _ = twin._run(x, y, sin, cos, soc="Ascend910B3", variant="test_only_probe_workspace_argument")
    assert out.flatten()[0].item() == 1.0


@pytest.mark.parametrize(
    "variant,rule,core,kernel",
    [(*v, "") for v in KERNEL_VARIANTS] + [(*v, "perm") for v in AIV_ONLY_VARIANTS],
    ids=[v for v, _, _ in KERNEL_VARIANTS + AIV_ONLY_VARIANTS],
)
def test_broken_kernel_raises_expected_rule(variant, rule, core, kernel):
    d = 44 if variant == "test_only_datacopy_unaligned_length" else 128
    x, y, sin, cos = _inputs(d=d)
    t0 = time.monotonic()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant=variant, kernel=kernel)
    assert time.monotonic() - t0 < 30, "the twin must stop, not hang"
    assert ei.value.rule == rule, str(ei.value)
    assert ei.value.core.startswith(core), str(ei.value)
    assert f"[{rule}]" in str(ei.value)


@pytest.mark.parametrize(
    "variant,rule,message",
    [
        ("test_only_datacopy_block_count", "datacopy-range", "DataCopyExtParams.blockCount = 4096 outside [0, 4095]"),
        ("test_only_datacopy_params_block_count", "datacopy-range", "DataCopyParams.blockCount = 4096 outside [0, 4095]"),
        ("test_only_datacopy_ext_block_len", "datacopy-range", "DataCopyExtParams.blockLen = 2097152 outside [0, 2097151]"),
        ("test_only_datacopy_pad_too_wide", "datacopy-range", "DataCopyPadExtParams.rightPadding = 17 outside [0, 16]"),
        ("test_only_matmul_used_cores_over_soc", "matmul-tiling", "usedCoreNum = 64 above the SoC's 20 cube cores"),
        ("test_only_event_v_m_on_vector", "event-core", "SetFlag<HardEvent::V_M> on a vector core, which has no PIPE_M"),
        ("test_only_event_mte1_v_on_cube", "event-core", "SetFlag<HardEvent::MTE1_V> on the cube core, which has no PIPE_V"),
        ("test_only_pipe_barrier_m_on_vector", "event-core", "PipeBarrier<PIPE_M> on a vector core, which has no such pipe"),
        ("test_only_crosscore_set_on_fix_from_vector", "flag-pipe", "CrossCoreSetFlag on PIPE_FIX on a vector core"),
    ],
)
def test_rule_message_names_the_field_or_the_call(variant, rule, message):
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant=variant)
    assert ei.value.rule == rule
    assert message in str(ei.value), str(ei.value)


@pytest.mark.parametrize("kernel", ["mix", "perm"])
def test_generated_wrapper_flag_is_the_only_flag_left(kernel):
    # On the cube core of a MIX kernel the wrapper's matmul::clearWorkspace raises flag 15 in mode 2
    # on both vector cores; nothing in a cube-only kernel waits for it, and every other counter is 0
    # at kernel end. A vector-only kernel's wrapper raises nothing.
    x, y, sin, cos = _inputs()
    _, rep = twin.run(x, y, sin, cos, soc="Ascend910B3", kernel=kernel)
    want = {"AIC": {}, "AIV": {15: 1} if kernel == "mix" else {}}
    assert [c["flags_left"] for c in rep["cores"]] == [want[c["type"]] for c in rep["cores"]]


def test_deadlock_report_names_the_waiting_core_and_flag():
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant="test_only_deadlock")
    assert "AIC_0 on flag 6" in str(ei.value)


def test_mode2_flags_count_per_vector_core():
    # One vector core setting twice must not satisfy the cube: the report names the counts.
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant="test_only_mode2_one_vector_sets_twice")
    msg = str(ei.value)
    assert "AIC_0 on flag 6" in msg
    assert "mode-2 flag 6 of block 0: set 2 times by AIV_0, 0 by AIV_1" in msg


def test_uninitialized_read_names_the_byte():
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant="test_only_uninitialized_workspace_read")
    assert "read of GM 'workspace' bytes [0, 256) includes byte 0 that nothing wrote" in str(ei.value)


def test_ub_uninitialized_read_names_the_byte():
    # The first copy-out (the 32 floats both inputs wrote) passes; the second reaches byte 128 of
    # the VECOUT buffer (at UB 512), computed from a never-written byte of the second TBuf.
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant="test_only_ub_uninitialized_reaches_gm")
    assert "DataCopyPad(UB->GM) takes UB bytes [512, 768) of which byte 640 holds no value" in str(ei.value)


def test_original_split_reads_past_the_tables():
    # The original operator split S as ceil(S / cores) per core: with S = 41 over 20 cube cores the
    # last cores get rows past S (its unsigned-underflow defect). Our kernel with that split must
    # be stopped at the first out-of-bounds GM access.
    x, y, sin, cos = _inputs(s=41)
    t = twin.tiling(3, 41, 1, 128)
    patch = {"sBase": -(-41 // t["blockDim"]), "sRem": 0}
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", tiling_patch=patch)
    assert ei.value.rule == "gm-out-of-bounds", str(ei.value)


def test_oversized_chunk_is_ub_over_budget():
    x, y, sin, cos = _inputs(s=1521)
    t = twin.tiling(3, 1521, 1, 128)
    assert t["chunkRows"] == 39  # 1521 rows / 20 cube cores -> 77 rows -> 39 per vector core
    big = t["ubBudget"] // (twin._twin.ub_bytes_per_element(2, 2) * t["dPad"]) + 1
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", tiling_patch={"chunkRows": big})
    assert ei.value.rule == "ub-over-budget", str(ei.value)
    assert str(twin._twin.UB_USABLE_BYTES) in str(ei.value)


def test_blockdim_over_core_count_is_rejected():
    x, y, sin, cos = _inputs(s=1521)
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", tiling_patch={"blockDim": 24})
    assert ei.value.rule == "block-dim"


def test_runaway_loop_is_stopped():
    x, y, sin, cos = _inputs(s=41)
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", op_limit=50)
    assert ei.value.rule == "runaway"


# ---- NPU limits of the launcher (same code on NPU and twin): ValueError/TypeError, values named


def test_npu_limits_name_argument_and_values():
    x, y, sin, cos = _inputs(d=128)
    with pytest.raises(
        TypeError, match="x must have dtype torch.bfloat16, torch.float16 or torch.float32 on the NPU, got torch.float64"
    ):
        twin.run(x.double(), y.double(), sin.double(), cos.double())
    xs = torch.randn(1, 2, 5, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"D = x.size\(-1\) must be >= 16, got 8"):
        twin.run(xs, torch.eye(8, dtype=torch.bfloat16), xs[0, 0], xs[0, 0])
    with pytest.raises(ValueError, match=r"sin \[1, 3, 41, 128\] varies along 2 dims"):
        twin.run(x, y, sin.expand(1, 3, 41, 128).contiguous(), cos)
    with pytest.raises(
        ValueError, match=r"sin \[3, 1, 128\] varies along dim 1 and cos \[41, 128\] along dim 2 of x \[1, 3, 41, 128\]"
    ):
        twin.run(x, y, sin[:3].reshape(3, 1, 128), cos)
    with pytest.raises(ValueError, match=r"^rope_matrix \(NPU\): the vector-only kernel \(perm\) needs mat to be a signed"):
        twin.run(x, torch.full((128, 128), 0.5, dtype=torch.bfloat16), sin, cos, kernel="perm")
    dense = torch.full((128, 128), 1.0 / 3.0)
    with pytest.raises(
        ValueError, match="mat has dtype torch.float32 with values not exactly representable in torch.bfloat16"
    ):
        twin.run(x, dense, sin, cos)
    with pytest.raises(
        ValueError, match=r"mat must be \[D, D\] with D = x.size\(-1\) = 128, got \[64, 64\]"
    ):
        twin.run(x, torch.eye(64, dtype=torch.bfloat16), sin, cos)


def test_docs_list_every_rule_the_twin_raises():
    """Every rule id the twin can stop with (a fail("rule", ...) or Violation(..., "rule", ...) in
    its sources) is named in docs/kernel.md."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "kernel.md").read_text()
    ids = set()
    for src in (root / "twin").rglob("*"):
        if src.suffix in (".h", ".cpp"):
            text = src.read_text()
            ids.update(re.findall(r'fail\(\s*"([a-z0-9-]+)"', text))
            ids.update(re.findall(r'Violation\(\s*"[^"]*",\s*"([a-z0-9-]+)"', text))
    assert len(ids) > 40, sorted(ids)
    missing = sorted(r for r in ids if f"`{r}`" not in doc)
    assert not missing, f"rules the twin raises but docs/kernel.md does not name: {missing}"
