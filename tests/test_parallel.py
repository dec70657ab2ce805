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


def _table_grads(x, g, mat, sin, cos):
    sin, cos = sin.clone().requires_grad_(), cos.clone().requires_grad_()
    x = x.clone().requires_grad_()
    ext.rope_matrix(x, mat, sin, cos).backward(g)
    return x.grad, sin.grad, cos.grad


# Shapes where torch's sum over B and N gave a shard's rows other bits than the same rows of the
# full tensor (the sum's split depends on the S x D block's size).
@pytest.mark.parametrize("b,n,s,d", [(1, 8, 12, 72), (2, 3, 40, 130), (2, 4, 24, 80), (1, 2, 4, 6), (3, 5, 16, 14)])
@pytest.mark.parametrize("form", ["[S, D]", "[1, 1, S, D]", "[B, 1, S, D]", "BSND [S, 1, D]"])
@pytest.mark.parametrize("mode", parallel.MODES)
def test_sharded_table_gradients_bitwise(b, n, s, d, form, mode):
    g = torch.Generator().manual_seed(b * 1000 + n * 100 + s + d)
    mat = tables.get_half_matrix(d)
    bsnd = form.startswith("BSND")
    shape = (b, s, n, d) if bsnd else (b, n, s, d)
    x, gr = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    tshape = {"[S, D]": (s, d), "[1, 1, S, D]": (1, 1, s, d), "[B, 1, S, D]": (b, 1, s, d),
              "BSND [S, 1, D]": (s, 1, d)}[form]
    sin, cos = torch.randn(tshape, generator=g), torch.randn(tshape, generator=g)
    xdim, tdim = (1, -3) if bsnd else (2, -2)
    full = _table_grads(x, gr, mat, sin, cos)
    for world in (2, 4):
        if s % (world * (2 if mode == "zigzag" else 1)):
            continue
        parts = []
        for r in range(world):
            cos_l, sin_l = parallel.shard_tables(cos, sin, world, r, seq_dim=tdim, mode=mode)
            parts.append(_table_grads(parallel.shard(x, world, r, xdim, mode), parallel.shard(gr, world, r, xdim, mode),
                                      mat, sin_l, cos_l))
        for i, name in enumerate(("dx", "dsin", "dcos")):
            got = parallel.unshard([p[i] for p in parts], xdim if i == 0 else tdim, mode)
            assert torch.equal(got, full[i]), f"{name}: {world} ranks, {mode}, {form}"
    # against an independent float64 sum
    red = tuple(i for i in range(x.dim()) if i >= x.dim() - len(tshape) and tshape[i - x.dim() + len(tshape)] == 1
                or i < x.dim() - len(tshape))
    want = (gr.double() * x.double()).sum(red, keepdim=True).reshape(tshape)
    torch.testing.assert_close(full[2].double(), want, rtol=1e-5, atol=1e-5)


def test_table_gradient_sum_against_float64_and_in_bf16():
    """The pairwise sum is no less exact than torch's: many heads, bf16 x, fp32 tables."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 37, 8, 16, generator=g).to(torch.bfloat16)
    gr = torch.randn(x.shape, generator=g).to(torch.bfloat16)
    cos = torch.randn(8, 16, generator=g).requires_grad_()
    ext.rope_matrix(x, tables.get_half_matrix(16), torch.zeros(8, 16), cos).backward(gr)
    want = (gr.double() * x.double()).sum((0, 1))
    err = (cos.grad.double() - want).abs().max().item()
    assert err <= 4 * torch.finfo(torch.float32).eps * (gr.double() * x.double()).abs().sum((0, 1)).max().item()


def test_shard_checks_its_arguments_on_a_size_1_dim_too():
    t = torch.rand(1, 8)
    for world, rank, mode, err in [(0, 0, "contiguous", ValueError), (2, 5, "contiguous", ValueError),
                                   (-3, -1, "contiguous", ValueError), (2, 0, "bogus", ValueError),
                                   (2.5, 0, "contiguous", TypeError), (2, "x", "contiguous", TypeError)]:
        with pytest.raises(err):
            parallel.shard(t, world, rank, dim=0, mode=mode)
        with pytest.raises(err):
            parallel.shard_tables(t, t, world, rank, seq_dim=-2, mode=mode)
    assert parallel.shard(t, 2, 1, dim=0) is t


def test_shard_tables_broadcast_tables_unchanged():
    cos, sin = torch.rand(16), torch.rand(4, 16)
    c, s = parallel.shard_tables(cos, sin, 2, 1, seq_dim=-2)
    assert c is cos and torch.equal(s, sin[2:])
    with pytest.raises(ValueError, match="rank"):
        parallel.shard_tables(cos, sin, 2, 2, seq_dim=-2)


def test_unshard_refuses_unequal_parts():
    with pytest.raises(ValueError, match="same number of rows"):
        parallel.unshard([torch.arange(6), torch.arange(4)], dim=0, mode="zigzag")
    with pytest.raises(ValueError, match="even"):
        parallel.unshard([torch.arange(3), torch.arange(3)], dim=0, mode="zigzag")
    with pytest.raises(ValueError, match="same number of rows"):
        parallel.unshard([torch.arange(3), torch.arange(2)], dim=0, mode="contiguous")
    with pytest.raises(TypeError, match="non-empty"):
        parallel.unshard([], dim=0)


def test_pad_tables_broadcast_and_checks():
    cos, sin = torch.rand(1, 4), torch.rand(5, 4)
    c, s = parallel.pad_tables(cos, sin, 8)
    assert c is cos and s.shape == (8, 4) and torch.equal(s[5:], torch.zeros(3, 4)) and torch.equal(s[:5], sin)
    d1 = torch.rand(4)
    c, s = parallel.pad_tables(d1, d1, 8)
    assert c is d1 and s is d1
    # BSND tables [S, 1, D]
    c, s = parallel.pad_tables(torch.rand(6, 1, 4), torch.rand(6, 1, 4), 8, seq_dim=-3)
    assert c.shape == (8, 1, 4) and torch.equal(c[6:], torch.ones(2, 1, 4)) and torch.equal(s[6:], torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match="same positions"):
        parallel.pad_tables(torch.rand(6, 8), torch.rand(5, 8), 8)
    with pytest.raises(ValueError, match="less than"):
        parallel.pad_tables(torch.rand(6, 8), torch.rand(6, 8), 4)
    with pytest.raises(ValueError, match="out of range"):
        parallel.pad_tables(torch.rand(6, 8), torch.rand(6, 8), 8, seq_dim=3)
    with pytest.raises(TypeError, match="seq_len"):
        parallel.pad_tables(torch.rand(6, 8), torch.rand(6, 8), 8.0)
    c = torch.rand(6, 8)
    assert parallel.pad_tables(c, c, 6)[0] is c


@pytest.mark.parametrize("xshape,tshape", [((3, 5, 7, 6), (7, 6)), ((3, 5, 7, 6), (1, 1, 7, 6)), ((3, 5, 7, 6), (3, 1, 7, 6)),
                                           ((3, 7, 5, 6), (7, 1, 6)), ((2, 9, 4), (4,)), ((0, 3, 4), (3, 4))])
def test_table_gradient_sum_in_place_and_recorded_agree(xshape, tshape):
    """The backward sums in place into its temporary; a recorded graph (double backward) sums out of
    place: the same pairs, the same bits, and close to a float64 sum."""
    from npu_ops_transformer_ext.autograd import _reduce_to

    t = torch.randn(xshape, generator=torch.Generator().manual_seed(1))
    a = _reduce_to(t.clone(), tshape)
    b = _reduce_to(t.clone().requires_grad_(), tshape)
    assert b.requires_grad and not a.requires_grad and a.shape == tshape
    assert torch.equal(a, b.detach())
    red = tuple(range(len(xshape) - len(tshape))) + tuple(
        len(xshape) - len(tshape) + i for i, n in enumerate(tshape) if n == 1 and xshape[len(xshape) - len(tshape) + i] != 1)
    want = t.double().sum(red, keepdim=True).reshape(tshape)
    torch.testing.assert_close(a.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["[S, D]", "[B, 1, S, D]", "BSND [S, 1, D]", "[1, D]", "[D]", "x's shape"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_table_gradients_in_slices_equal_the_recorded_whole(form, dtype):
    """A backward that records no graph sums the table gradients slice by slice along a dim the
    table keeps; with create_graph it sums the whole at once: the same bits, near a float64 sum."""
    b, n, s, d = 2, 5, 160, 128  # above the slice size, so the plain backward slices
    bsnd = form.startswith("BSND")
    shape = (b, s, n, d) if bsnd else (b, n, s, d)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=gen).to(dtype)
    gr = torch.randn(shape, generator=gen).to(dtype)
    tshape = {"[S, D]": (s, d), "[B, 1, S, D]": (b, 1, s, d), "BSND [S, 1, D]": (s, 1, d), "[1, D]": (1, d),
              "[D]": (d,), "x's shape": shape}[form]
    sin, cos = torch.randn(tshape, generator=gen), torch.randn(tshape, generator=gen)
    mat = tables.get_half_matrix(d)

    def grads(create_graph):
        sn, cs = sin.clone().requires_grad_(), cos.clone().requires_grad_()
        out = ext.rope_matrix(x, mat, sn, cs)
        return torch.autograd.grad(out, (sn, cs), gr, create_graph=create_graph)

    sliced, whole = grads(False), grads(True)
    for a, w in zip(sliced, whole):
        assert torch.equal(a, w.detach())
    red = tuple(range(len(shape) - len(tshape))) + tuple(
        len(shape) - len(tshape) + i for i, m in enumerate(tshape) if m == 1 and shape[len(shape) - len(tshape) + i] != 1)
    want = (gr.double() * x.double()).sum(red, keepdim=True).reshape(tshape) if red else gr.double() * x.double()
    torch.testing.assert_close(sliced[1].double(), want, rtol=1e-5, atol=1e-4)


def test_table_seq_dim_must_not_be_the_head_dim():
    c = torch.rand(8, 4)
    for call in (lambda sd: parallel.shard_tables(c, c, 2, 0, seq_dim=sd), lambda sd: parallel.pad_tables(c, c, 10, seq_dim=sd)):
        with pytest.raises(ValueError, match="head dim D"):
            call(-1)
        with pytest.raises(ValueError, match="head dim D"):
            call(1)
    d1 = torch.rand(4)
    with pytest.raises(ValueError, match="head dim D"):
        parallel.shard_tables(d1, d1, 2, 0, seq_dim=0)
    assert parallel.shard_tables(d1, d1, 2, 0, seq_dim=-3)[0] is d1


def test_shard_tables_refuses_cos_and_sin_of_different_lengths():
    cos, sin = torch.randn(16, 8), torch.randn(8, 8)
    with pytest.raises(ValueError, match=r"cos \[16, 8\] and sin \[8, 8\] must have the same length along seq_dim -2"):
        parallel.shard_tables(cos, sin, 2, 0)
    # a table broadcast along the sequence goes with any length
    c, s = parallel.shard_tables(cos, sin[:1], 2, 1)
    assert torch.equal(c, cos[8:]) and torch.equal(s, sin[:1])
