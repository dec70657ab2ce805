"""The twin's pipe/hazard model (rule `pipe-race`): asynchronous pipes inside one core.

A missing synchronisation between two pipes that touch the same UB bytes is stopped with
`pipe-race` naming the kind (RAW/WAR/WAW), both pipes, the bytes and both instructions; the same
kernel with its SetFlag/WaitFlag or PipeBarrier<PIPE_ALL> passes, so the rule is about the sync.
Two copies of one pipe (MTE2, MTE3) whose destinations overlap need a PipeBarrier on that pipe
(`same-pipe-overlap`); with it they pass.
The broken kernels are TEST-ONLY (twin/test_kernels/broken_kernels.cpp).
"""

from __future__ import annotations

import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix

twin = pytest.importorskip("npu_ops_transformer_ext.twin")


def _inputs(s=41, d=128):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, s, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(s, d, generator=g).to(torch.bfloat16)
    cos = torch.randn(s, d, generator=g).to(torch.bfloat16)
    return x, y, sin, cos


# variant: (rule, core prefix, parts of the message)
MISSING_SYNC = {
    "test_only_pipe_race_tbuf_read": (
        "pipe-race",
        "AIV_",
        [
            "RAW between pipes: Cast (instruction #1 of PIPE_V) reads UB bytes [0, 32)",
            "DataCopyPad(GM->UB) (instruction #1 of PIPE_MTE2) wrote",
            "SetFlag/WaitFlag<HardEvent::MTE2_V>",
        ],
    ),
    "test_only_pipe_race_overwrite_after_copy_out": (
        "pipe-race",
        "AIV_",
        [
            "WAR between pipes: Duplicate (instruction #2 of PIPE_V) writes UB bytes [0, 32)",
            "DataCopyPad(UB->GM) (instruction #1 of PIPE_MTE3) read",
            "SetFlag/WaitFlag<HardEvent::MTE3_V>",
        ],
    ),
    # The DataCopy pages' constraint: consecutive copies with overlapping destinations need
    # PipeBarrier<PIPE_MTE2> (UB destination) or PipeBarrier<PIPE_MTE3> (GM destination).
    "test_only_mte2_overlapping_dst": (
        "same-pipe-overlap",
        "AIV_",
        [
            "DataCopyPad(GM->UB) (instruction #2 of PIPE_MTE2) writes UB bytes [0, 32)",
            "DataCopyPad(GM->UB) (instruction #1 of PIPE_MTE2) also writes",
            "no PipeBarrier<PIPE_MTE2>",
        ],
    ),
    "test_only_mte3_overlapping_dst": (
        "same-pipe-overlap",
        "AIV_",
        [
            "DataCopyPad(UB->GM) (instruction #2 of PIPE_MTE3) writes GM 'out' bytes",
            "DataCopyPad(UB->GM) (instruction #1 of PIPE_MTE3) also writes",
            "no PipeBarrier<PIPE_MTE3>",
        ],
    ),
    # The Matmul model runs MTE2 GM -> L1, MTE1 L1 -> L0A/L0B, M Mmad -> L0C, FIX L0C -> GM with
    # the implementation's syncs; dropping one (a test hook) is a race named by its memory. The
    # production kernel on the intact model is the synced version: the whole twin matrix passes.
    "test_only_matmul_without_mte2_mte1_wait": (
        "pipe-race",
        "AIC_",
        ["RAW between pipes: Matmul: A block L1 -> L0A (MTE1)", "reads L1 bytes [0, 32)",
         "Matmul: A block GM -> L1 (MTE2) (instruction #1 of PIPE_MTE2) wrote", "HardEvent::MTE2_MTE1"],
    ),
    "test_only_matmul_without_mte1_m_wait": (
        "pipe-race",
        "AIC_",
        ["RAW between pipes: Matmul: Mmad L0A x L0B -> L0C (M)", "reads L0A bytes [0, 32)",
         "Matmul: A block L1 -> L0A (MTE1)", "HardEvent::MTE1_M"],
    ),
    "test_only_matmul_without_m_fix_wait": (
        "pipe-race",
        "AIC_",
        ["RAW between pipes: Matmul: FixPipe L0C -> GM (FIX)", "reads L0C bytes [0, 32)",
         "Matmul: Mmad L0A x L0B -> L0C (M)", "HardEvent::M_FIX"],
    ),
}


@pytest.mark.parametrize("variant", list(MISSING_SYNC))
def test_missing_sync_names_the_pipes_memory_and_bytes(variant):
    rule, core, expected = MISSING_SYNC[variant]
    x, y, sin, cos = _inputs()
    with pytest.raises(twin.TwinError) as ei:
        twin._run(x, y, sin, cos, soc="Ascend910B3", variant=variant)
    assert ei.value.rule == rule, str(ei.value)
    assert ei.value.core.startswith(core), str(ei.value)
    for part in expected:
        assert part in str(ei.value), str(ei.value)


@pytest.mark.parametrize(
    "variant",
    [
        "test_only_synced_tbuf_read",
        "test_only_synced_overwrite_after_copy_out",
        "test_only_synced_mte2_overlapping_dst",
        "test_only_synced_mte3_overlapping_dst",
        "test_only_core_events_pass",
    ],
)
def test_same_kernel_with_its_sync_passes(variant):
    x, y, sin, cos = _inputs()
    twin._run(x, y, sin, cos, soc="Ascend910B3", variant=variant)


@pytest.mark.parametrize("kernel", ["mix", "perm"])
@pytest.mark.parametrize("d", [34, 40])
def test_padding_columns_pass_the_ub_initcheck(kernel, d):
    # With D mod 16 in 1..8, 16-bit x and fp32 tables, a table row's last 32-byte block in UB is
    # padding no copy writes; the vector ops compute on it and the copy-out drops it. The UB
    # initcheck tracks what reaches GM, so this passes, and the result is exact.
    g = torch.Generator().manual_seed(1)
    s = 41
    x = torch.randn(1, 3, s, d, generator=g).to(torch.bfloat16)
    y = mode_matrix("half", [d], dtype=torch.bfloat16)
    sin = torch.randn(s, d, generator=g)
    cos = torch.randn(s, d, generator=g)
    out, _ = twin.run(x, y, sin, cos, soc="Ascend910B3", kernel=kernel)
    ref = (x.float() * cos + (x.float() @ y.float()) * sin).to(torch.bfloat16)
    assert torch.equal(out, ref)
