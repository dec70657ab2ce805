"""A small attention block using the op compiles with fullgraph=True and matches eager, forward
and backward (q/k/v from one fused projection: non-contiguous BNSD views, GQA, cached tables)."""

import npu_ops_transformer_ext as ext
import pytest
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, dim=64, heads=4, kv_heads=2, mode="half", rotary_dim=None):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.hd)
        self.out = torch.nn.Linear(heads * self.hd, dim)
        self.rope = ext.RotaryEmbedding(self.hd, mode=mode, rotary_dim=rotary_dim, layout="BNSD")

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, -1, self.hd).split([self.h, self.kv, self.kv], dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # BNSD views
        q, k = self.rope(q, k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.out(o.transpose(1, 2).reshape(b, s, -1))


def _grads(model, x):
    out = model(x)
    out.square().mean().backward()
    g = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    return out.detach(), g


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_block_fullgraph_matches_eager(backend):
    torch.manual_seed(0)
    model = Block(mode="half" if backend == "inductor" else "interleave", rotary_dim=12)
    x = torch.randn(2, 11, 64, requires_grad=True)
    want, want_g = _grads(model, x)  # eager; also fills the table cache
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    got, got_g = _grads(compiled, x)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd")
def test_compiled_graph_keeps_the_op():
    """The op and its backward helper are single nodes of the traced graphs (not decomposed)."""
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(1, 7, 64, requires_grad=True)
    model(x)
    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    torch.compile(model, fullgraph=True, backend=backend)(x).sum().backward()
    fw = "".join(g.code for g in backend.fw_graphs)
    bw = "".join(g.code for g in backend.bw_graphs)
    assert "npu_ops_transformer_ext.rope_matrix_qk" in fw
    assert "npu_ops_transformer_ext.rope_matrix_qk_backward" in bw


def test_rotary_embedding_with_dynamic_true_after_building_its_tables():
    """dynamic=True makes the module's float settings symbolic, so its tables are built before
    compiling (docs/training.md); every length within them then only slices the cache."""
    rope = ext.RotaryEmbedding(8, layout="BNSD")
    rope.tables(64)
    torch._dynamo.reset()
    compiled = torch.compile(rope, backend="aot_eager", fullgraph=True, dynamic=True)
    g = torch.Generator().manual_seed(0)
    for s in (5, 40, 64):
        q, k = torch.randn(2, 3, s, 8, generator=g), torch.randn(2, 1, s, 8, generator=g)
        for a, b in zip(compiled(q, k), rope(q, k)):
            assert torch.equal(a, b)
