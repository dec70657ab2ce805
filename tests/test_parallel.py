"""Sequence-parallel table slicing: unit checks, and torch.distributed (gloo, 2 and 4 CPU processes)
showing sharded forward and backward, gathered, equal the single-process result bit for bit."""

import os
import tempfile

import npu_ops_transformer_ext as ext
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from npu_ops_transformer_ext import parallel, tables


@pytest.mark.parametrize("mode", parallel.MODES)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_indices_partition_and_unshard(mode, world):
    s = 24
    idx = [parallel.shard_indices(s, world, r, mode) for r in range(world)]
    assert torch.equal(torch.cat(idx).sort().values, torch.arange(s))
    x = torch.arange(s * 2).view(1, s, 2)
    parts = [parallel.shard(x, world, r, dim=1, mode=mode) for r in range(world)]
    for r in range(world):
        assert torch.equal(parts[r], x[:, idx[r]])
    assert torch.equal(parallel.unshard(parts, dim=1, mode=mode), x)


def test_zigzag_layout_and_errors():
    assert parallel.shard_indices(8, 2, 0, "zigzag").tolist() == [0, 1, 6, 7]
    assert parallel.shard_indices(8, 2, 1, "zigzag").tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="multiple of 4"):
        parallel.shard_indices(6, 2, 0, "zigzag")
    with pytest.raises(ValueError, match="rank"):
        parallel.shard_indices(8, 2, 2)
    cos, sin = torch.rand(5, 4), torch.rand(5, 4)
    c, s = parallel.pad_tables(cos, sin, 8)
    assert (
        c.shape == (8, 4)
        and torch.equal(c[5:], torch.ones(3, 4))
        and torch.equal(s[5:], torch.zeros(3, 4))
    )
    # a table broadcast along S ([1, D]) is the same on every rank
    assert parallel.shard(cos[:1], 2, 1, dim=-2) is not None


def _problem(s=24, d=32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, s, d, generator=g, dtype=torch.float32).to(torch.bfloat16)  # BNSD
    k = torch.randn(2, 2, s, d, generator=g, dtype=torch.float32).to(torch.bfloat16)
    gq = torch.randn(q.shape, generator=g).to(torch.bfloat16)
    gk = torch.randn(k.shape, generator=g).to(torch.bfloat16)
    t = tables.rope_1d(s, d, mode="half")
    return q, k, gq, gk, t


def _run(q, k, gq, gk, mat, sin, cos):
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    sin, cos = sin.clone().requires_grad_(), cos.clone().requires_grad_()
    qo, ko = ext.rope_matrix_qk(q, k, mat, sin, cos)
    torch.autograd.backward((qo, ko), (gq, gk))
    return qo.detach(), ko.detach(), q.grad, k.grad, sin.grad, cos.grad


def _worker(rank, world, init_file, results_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        q, k, gq, gk, t = _problem()
        for mode in parallel.MODES:
            sh = lambda x, mode=mode: parallel.shard(x, world, rank, dim=2, mode=mode)
            cos_l, sin_l = parallel.shard_tables(t.cos, t.sin, world, rank, seq_dim=-2, mode=mode)
            local = _run(sh(q), sh(k), sh(gq), sh(gk), t.mat, sin_l, cos_l)
            gathered = []
            for tensor in local:
                bufs = [torch.empty_like(tensor) for _ in range(world)]
                dist.all_gather(bufs, tensor.contiguous())
                gathered.append(parallel.unshard(bufs, dim=-2, mode=mode))
            if rank == 0:
                torch.save(gathered, os.path.join(results_dir, f"{mode}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_distributed_sharded_forward_backward_bitwise(world):
    """Contiguous and zigzag in one process group of `world` gloo ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, os.path.join(tmp, "init"), tmp), nprocs=world, join=True)
        gathered = {m: torch.load(os.path.join(tmp, f"{m}.pt")) for m in parallel.MODES}
    q, k, gq, gk, t = _problem()
    full = _run(q, k, gq, gk, t.mat, t.sin, t.cos)
    names = ["q_out", "k_out", "dq", "dk", "dsin", "dcos"]
    for mode in parallel.MODES:
        for name, a, b in zip(names, gathered[mode], full):
            assert torch.equal(a, b), (
                f"{name} differs between the {world}-rank {mode} run and one process"
            )
