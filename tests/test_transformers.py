"""The transformers drop-in against the real ``transformers`` package, on tiny randomly initialised
models built from configs (nothing is downloaded): logits, greedy generation, training steps, and
what patching changes and restores. Skipped when ``transformers`` is not installed."""

import importlib
import math

import pytest
import torch

T = pytest.importorskip("transformers")

from npu_ops_transformer_ext import matrices
from npu_ops_transformer_ext import transformers as nt

FAMILIES = {
    "llama": ("LlamaConfig", "llama"),
    "mistral": ("MistralConfig", "mistral"),
    "qwen2": ("Qwen2Config", "qwen2"),
    "qwen3": ("Qwen3Config", "qwen3"),
}


def _modeling(family):
    import importlib

    return importlib.import_module(f"transformers.models.{family}.modeling_{family}")


def _tiny(family, dtype=torch.float32, seed=0, **cfg):
    config = getattr(T, FAMILIES[family][0])(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        **cfg,
    )
    torch.manual_seed(seed)
    return T.AutoModelForCausalLM.from_config(config).to(dtype).eval()


def _ids(b=2, s=17, seed=1):
    return torch.randint(0, 96, (b, s), generator=torch.Generator().manual_seed(seed))


def _ulp_at(x: torch.Tensor, dtype) -> float:
    """One unit in the last place of ``dtype`` at the magnitude of x's largest element."""
    m = x.float().abs().max().item()
    return 2.0 ** math.floor(math.log2(m)) * torch.finfo(dtype).eps


@pytest.fixture(autouse=True)
def _clean():
    yield
    nt.unpatch_transformers()


@pytest.fixture
def calls(monkeypatch):
    """Counts the drop-in's rope_matrix_qk calls."""
    from npu_ops_transformer_ext import _per_sample  # where the drop-ins' calls of the ops are

    seen = []
    real = _per_sample.rope_matrix_qk

    def counting(*a):
        seen.append(a[0].shape)
        return real(*a)

    monkeypatch.setattr(_per_sample, "rope_matrix_qk", counting)
    return seen


# ---- the function -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_apply_rotary_pos_emb_matches_hf(dtype):
    """HF's own cos/sin from the model's rotary module. float32: bit for bit. bf16/fp16: the op's
    value is HF's formula in float32 rounded once, bit for bit; HF rounds each product and the sum
    in the half type, so the two differ by at most HF's own rounding error."""
    hf = _modeling("llama")
    model = _tiny("llama")
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38]])
    q = torch.randn(2, 4, 9, 16).to(dtype)
    k = torch.randn(2, 2, 9, 16).to(dtype)
    cos, sin = model.model.rotary_emb(q, pos)
    assert cos.dtype == dtype
    want = hf.apply_rotary_pos_emb(q, k, cos, sin)
    got = nt.apply_rotary_pos_emb(q, k, cos, sin)
    c, s = cos.float()[:, None], sin.float()[:, None]
    for x, g, w in zip((q, k), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        a, b = x.float() * c, hf.rotate_half(x.float()) * s
        assert torch.equal(g, (a + b).to(dtype))
        if dtype == torch.float32:
            assert torch.equal(g, w)
        else:
            bound = torch.finfo(dtype).eps * (a.abs() + b.abs() + (a + b).abs())
            assert ((g.float() - w.float()).abs() <= bound).all()
    # BSND q/k with unsqueeze_dim=2, positionally as HF's signature; legacy position_ids is ignored
    qs, ks = q.transpose(1, 2), k.transpose(1, 2)
    got2 = nt.apply_rotary_pos_emb(qs, ks, cos, sin, pos, 2)
    assert torch.equal(got2[0], got[0].transpose(1, 2)) and torch.equal(
        got2[1], got[1].transpose(1, 2)
    )
    got4 = nt.apply_rotary_pos_emb(qs, ks, cos, sin, 2)  # transformers 5's positional form
    assert torch.equal(got4[0], got2[0]) and torch.equal(got4[1], got2[1])
    # the oldest HF form: 2-D tables [max_len, D] indexed with position_ids
    full_cos, full_sin = model.model.rotary_emb(q, torch.arange(64)[None])
    got3 = nt.apply_rotary_pos_emb(q, k, full_cos[0], full_sin[0], position_ids=pos)
    assert torch.equal(got3[0], got[0]) and torch.equal(got3[1], got[1])


def test_apply_rotary_pos_emb_promotes_like_hf():
    """bf16 q with float32 tables (autocast-style) gives HF's float32 result."""
    hf = _modeling("llama")
    q, k = torch.randn(1, 2, 5, 8).bfloat16(), torch.randn(1, 1, 5, 8).bfloat16()
    ang = torch.arange(5.0)[:, None] * torch.rand(4)
    cos, sin = torch.cat([ang, ang], -1).cos()[None], torch.cat([ang, ang], -1).sin()[None]
    for g, w in zip(
        nt.apply_rotary_pos_emb(q, k, cos, sin), hf.apply_rotary_pos_emb(q, k, cos, sin)
    ):
        assert g.dtype == w.dtype == torch.float32
        assert torch.equal(g, w)


# ---- whole models -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_model_logits(family, dtype, calls):
    model = _tiny(family, dtype)
    mod = _modeling(family)
    orig = mod.apply_rotary_pos_emb
    ids = _ids()
    with torch.no_grad():
        want = model(ids).logits
        assert nt.patch_transformers(model) == [mod.__name__]
        assert mod.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
        got = model(ids).logits
        assert len(calls) == 2, "the patched model did not call rope_matrix_qk once per layer"
        nt.unpatch_transformers(model)
        assert mod.apply_rotary_pos_emb is orig
        back = model(ids).logits
    assert len(calls) == 2, "the unpatched model still calls rope_matrix_qk"
    assert torch.equal(back, want)
    if dtype == torch.float32:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=_ulp_at(want, dtype))


OTHER_FAMILIES = {
    "mixtral": (
        "MixtralConfig",
        {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16},
    ),
    "gemma2": ("Gemma2Config", {"head_dim": 16}),
    "phi": ("PhiConfig", {"partial_rotary_factor": 0.5}),  # partial rotary: q[..., :r] passed in
    "stablelm": ("StableLmConfig", {"partial_rotary_factor": 0.25}),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "head_dim": 16},
    ),
}


@pytest.mark.parametrize("family", list(OTHER_FAMILIES))
def test_other_standard_families(family, calls):
    """Families beyond the four named ones whose modeling file has the standard function: found
    from the model, float32 logits bit for bit."""
    cls, kw = OTHER_FAMILIES[family]
    config = getattr(T, cls)(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        **kw,
    )
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    ids = _ids(s=9)
    with torch.no_grad():
        want = model(ids).logits
        assert nt.patch_transformers(model) == [_modeling(family).__name__]
        got = model(ids).logits
    assert calls and torch.equal(got, want)


def test_partial_and_keep_dtype_forms_match_hf():
    """GPT-NeoX's partial form (the first cos.shape[-1] dims rotate) and OLMo's form (cast back to
    q.dtype) against HF's own functions: float32 bit for bit, and OLMo's bf16 q with float32
    tables bit for bit (HF computes that in float32 and rounds once, as the op does)."""
    neox, olmo = _modeling("gpt_neox"), _modeling("olmo")
    q, k = torch.randn(2, 4, 9, 16), torch.randn(2, 2, 9, 16)
    ang = torch.arange(9.0)[:, None] * torch.rand(4)
    cos = torch.cat([ang, ang], -1).cos().expand(2, 9, 8)
    sin = torch.cat([ang, ang], -1).sin().expand(2, 9, 8)
    for g, w in zip(
        nt.apply_rotary_pos_emb_partial(q, k, cos, sin), neox.apply_rotary_pos_emb(q, k, cos, sin)
    ):
        assert g.dtype == w.dtype and torch.equal(g, w)
    full_cos = torch.cat([cos, cos], -1)
    full_sin = torch.cat([sin, sin], -1)
    for dtype in (torch.float32, torch.bfloat16):
        qd, kd = q.to(dtype), k.to(dtype)
        got = nt.apply_rotary_pos_emb_keep_dtype(qd, kd, full_cos, full_sin)
        want = olmo.apply_rotary_pos_emb(qd, kd, full_cos, full_sin)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype == dtype and torch.equal(g, w)


FORM_FAMILIES = {
    "gpt_neox": (
        "GPTNeoXConfig",
        {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
            }
        },
    ),
    "olmo": ("OlmoConfig", {}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", list(FORM_FAMILIES))
def test_partial_and_keep_dtype_families(family, dtype, calls):
    cls, kw = FORM_FAMILIES[family]
    config = getattr(T, cls)(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        **kw,
    )
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).to(dtype).eval()
    mod = _modeling(family)
    ids = _ids()
    with torch.no_grad():
        want = model(ids).logits
        nt.patch_transformers(model)
        assert mod.apply_rotary_pos_emb in (
            nt.apply_rotary_pos_emb_partial,
            nt.apply_rotary_pos_emb_keep_dtype,
        )
        got = model(ids).logits
    assert len(calls) == 2
    if dtype == torch.float32:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=_ulp_at(want, dtype))


def test_patched_model_compiles_fullgraph(calls):
    """Patched, then compiled with fullgraph=True: the graph holds the op and matches eager;
    unpatching makes dynamo recompile with HF's own function."""
    model = _tiny("llama")
    ids = _ids()
    with torch.no_grad():
        want = model(ids).logits
        nt.patch_transformers(model)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        got = compiled(ids).logits
        assert calls, "the compiled graph does not go through rope_matrix_qk"
        n = len(calls)
        nt.unpatch_transformers(model)
        back = compiled(ids).logits
    assert len(calls) == n
    assert torch.equal(got, want) and torch.equal(back, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_generation_identical(dtype):
    """KV-cache decode (one new token per step, offsets from the cache) gives the same tokens."""
    model = _tiny("qwen2", dtype)
    ids = _ids(b=2, s=7, seed=3)
    kw = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        want = model.generate(ids, **kw)
        with nt.rope_matrix_enabled(model):
            got = model.generate(ids, **kw)
    assert torch.equal(got, want)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_training_steps_equal_losses(family):
    """Three AdamW steps from the same weights: the same losses (float32: bit for bit, since the op's
    forward and backward compute what autograd of HF's formula computes)."""

    def run(patch):
        model = _tiny(family).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        ctx = nt.rope_matrix_enabled(model) if patch else _null()
        with ctx:
            for step in range(3):
                ids = _ids(b=2, s=11, seed=10 + step)
                loss = model(ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
        return losses

    want, got = run(False), run(True)
    assert got == want, (got, want)
    assert want[0] != want[-1]  # the steps did train


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


# ---- what patching touches ----------------------------------------------------------------------


def test_patch_is_limited_to_the_families_asked_for():
    llama, qwen2, mistral = _modeling("llama"), _modeling("qwen2"), _modeling("mistral")
    q2_orig, mi_orig = qwen2.apply_rotary_pos_emb, mistral.apply_rotary_pos_emb
    a, b = _tiny("llama"), _tiny("llama")
    nt.patch_transformers(a)
    assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
    assert qwen2.apply_rotary_pos_emb is q2_orig and mistral.apply_rotary_pos_emb is mi_orig
    nt.patch_transformers(b)
    assert nt.unpatch_transformers(a) == []  # b still holds the llama patch
    assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
    assert nt.unpatch_transformers(b) == [llama.__name__]
    assert nt.patched_modules() == []
    # by family name, and the defaults
    assert nt.patch_transformers(families=["qwen2"]) == [qwen2.__name__]
    assert nt.patched_modules() == [qwen2.__name__]
    nt.unpatch_transformers("qwen2")
    assert qwen2.apply_rotary_pos_emb is q2_orig
    assert len(nt.patch_transformers()) == len(nt.DEFAULT_FAMILIES)
    assert nt.unpatch_transformers() and nt.patched_modules() == []


def test_patch_released_when_model_is_collected():
    import gc

    llama = _modeling("llama")
    orig = llama.apply_rotary_pos_emb
    m = _tiny("llama")
    nt.patch_transformers(m)
    del m
    gc.collect()
    assert llama.apply_rotary_pos_emb is orig


def test_patch_refuses_non_standard_and_non_models():
    # GPT-J rotates interleaved pairs in its own function: not the standard one
    with pytest.raises(ValueError, match="none of the forms"):
        nt.patch_transformers("gptj")
    assert nt.patched_modules() == []
    with pytest.raises(TypeError, match="not a transformers model"):
        nt.patch_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no transformers modeling module"):
        nt.patch_transformers("no_such_family")


def test_patch_compiled_model_wrapper():
    model = _tiny("llama")
    compiled = torch.compile(model)
    assert nt.patch_transformers(compiled) == [_modeling("llama").__name__]
    nt.unpatch_transformers(compiled)
    assert nt.patched_modules() == []


def test_context_manager_restores_only_what_it_patched():
    llama, qwen3 = _modeling("llama"), _modeling("qwen3")
    q3_orig = qwen3.apply_rotary_pos_emb
    model = _tiny("llama")
    nt.patch_transformers(model)
    with nt.rope_matrix_enabled(families=["llama", "qwen3"]) as names:
        assert names == [llama.__name__, qwen3.__name__]
        assert qwen3.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
    assert qwen3.apply_rotary_pos_emb is q3_orig  # patched by the block: restored
    assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb  # patched before: kept
    with nt.rope_matrix_enabled(model):
        pass
    assert nt.patched_modules() == [llama.__name__]  # the model's own patch is still held


def _held_by_a_model_then_block(block):
    """A model holds the llama patch, a block runs, the model is unpatched: what is left?"""
    llama = _modeling("llama")
    orig = llama.apply_rotary_pos_emb
    model = _tiny("llama")
    nt.patch_transformers(model)
    with block(model) as names:
        assert llama.__name__ in names
        assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
    assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb  # the model's hold remains
    assert nt.unpatch_transformers(model) == [llama.__name__]
    assert nt.patched_modules() == [] and llama.apply_rotary_pos_emb is orig


@pytest.mark.parametrize(
    "block",
    [
        lambda m: nt.rope_matrix_enabled(families="llama"),
        lambda m: nt.rope_matrix_enabled(families=["llama", "qwen3"]),
        lambda m: nt.rope_matrix_enabled("llama"),
        lambda m: nt.rope_matrix_enabled(_modeling("llama")),
        lambda m: nt.rope_matrix_enabled(),
        lambda m: nt.rope_matrix_enabled(m),
        lambda m: nt.rope_matrix_enabled(_tiny("llama", seed=5)),
    ],
    ids=[
        "families-str",
        "families-list",
        "name",
        "module",
        "defaults",
        "same-model",
        "other-model",
    ],
)
def test_context_manager_releases_its_hold_on_a_family_already_patched(block):
    """Every way into the block: on exit the block's own hold goes, so the family is restored
    as soon as the hold it had before (the model's) is released."""
    _held_by_a_model_then_block(block)


def test_context_manager_nested_and_interleaved():
    llama, qwen2 = _modeling("llama"), _modeling("qwen2")
    l_orig, q_orig = llama.apply_rotary_pos_emb, qwen2.apply_rotary_pos_emb
    with nt.rope_matrix_enabled("llama"):
        with nt.rope_matrix_enabled(families=["llama", "qwen2"]):
            with nt.rope_matrix_enabled("llama"):
                pass
            assert nt.patched_modules() == [llama.__name__, qwen2.__name__]
        assert nt.patched_modules() == [llama.__name__]
    assert nt.patched_modules() == [] and llama.apply_rotary_pos_emb is l_orig
    # overlapping, exited in the order entered
    a, b = nt.rope_matrix_enabled("llama"), nt.rope_matrix_enabled(families=["llama", "qwen2"])
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert nt.patched_modules() == [llama.__name__, qwen2.__name__]
    b.__exit__(None, None, None)
    assert nt.patched_modules() == []
    assert llama.apply_rotary_pos_emb is l_orig and qwen2.apply_rotary_pos_emb is q_orig


def test_context_manager_exception_and_patches_inside_the_block():
    llama = _modeling("llama")
    orig = llama.apply_rotary_pos_emb
    model = _tiny("llama")
    nt.patch_transformers(model)
    with pytest.raises(RuntimeError, match="boom"), nt.rope_matrix_enabled("llama"):
        raise RuntimeError("boom")
    nt.unpatch_transformers(model)
    assert nt.patched_modules() == [] and llama.apply_rotary_pos_emb is orig
    # a model patched inside the block keeps its patch after it; one unpatched inside the block
    # keeps the family patched until the block ends
    with nt.rope_matrix_enabled(model):
        nt.patch_transformers(model)
    assert nt.patched_modules() == [llama.__name__]
    with nt.rope_matrix_enabled("llama"):
        assert nt.unpatch_transformers(model) == []
        assert llama.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
    assert nt.patched_modules() == [] and llama.apply_rotary_pos_emb is orig
    # a patch by name inside the block remains; so does a model's; restoring all inside is fine
    with nt.rope_matrix_enabled(model):
        nt.patch_transformers("llama")
    assert nt.patched_modules() == [llama.__name__]
    nt.unpatch_transformers("llama")
    with nt.rope_matrix_enabled("llama"):
        nt.unpatch_transformers()
        nt.patch_transformers(model)
    assert nt.patched_modules() == [llama.__name__]  # held by the model, not by the block
    nt.unpatch_transformers(model)
    assert nt.patched_modules() == [] and llama.apply_rotary_pos_emb is orig


# ---- DeepSeek-V3's interleaved form -------------------------------------------------------------


def _tiny_deepseek(dtype=torch.float32, seed=0, **cfg):
    config = T.DeepseekV3Config(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        **cfg,
    )
    torch.manual_seed(seed)
    return T.AutoModelForCausalLM.from_config(config).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_apply_rotary_pos_emb_interleave_matches_hf(dtype):
    """Against HF's own function with the model's own tables, on q/k slices as the attention
    passes them: float32 bit for bit; bf16/fp16 the float32 value rounded once, within HF's own
    rounding error of HF's result. bf16 q with float32 tables: HF's float32 result bit for bit."""
    hf = _modeling("deepseek_v3")
    model = _tiny_deepseek()
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38]])
    q = torch.randn(2, 4, 9, 24)[..., 16:].to(dtype)  # [nope | rope] split: a strided slice
    k = torch.randn(2, 1, 9, 8).to(dtype)
    cos, sin = model.model.rotary_emb(q, pos)
    cos, sin = cos.to(dtype), sin.to(dtype)
    want = hf.apply_rotary_pos_emb_interleave(q, k, cos, sin)
    got = nt.apply_rotary_pos_emb_interleave(q, k, cos, sin)
    c, s = cos.float()[:, None, :, :4], sin.float()[:, None, :, :4]
    for x, g, w in zip((q, k), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
        a = torch.cat([x1 * c, x2 * c], -1)
        b = torch.cat([-x2 * s, x1 * s], -1)
        assert torch.equal(g, (a + b).to(dtype))
        if dtype == torch.float32:
            assert torch.equal(g, w)
        else:
            bound = torch.finfo(dtype).eps * (a.abs() + b.abs() + (a + b).abs())
            assert ((g.float() - w.float()).abs() <= bound).all()
    # BSND with unsqueeze_dim=2; position_ids is ignored, as HF ignores it
    qs, ks = q.transpose(1, 2), k.transpose(1, 2)
    got2 = nt.apply_rotary_pos_emb_interleave(qs, ks, cos, sin, pos, unsqueeze_dim=2)
    assert torch.equal(got2[0], got[0].transpose(1, 2))
    assert torch.equal(got2[1], got[1].transpose(1, 2))
    if dtype == torch.float32:
        # tables whose halves differ: HF reads the first half only, and so does the drop-in
        cos2, sin2 = torch.randn(2, 9, 8), torch.randn(2, 9, 8)
        for g, w in zip(
            nt.apply_rotary_pos_emb_interleave(q, k, cos2, sin2),
            hf.apply_rotary_pos_emb_interleave(q, k, cos2, sin2),
        ):
            assert torch.equal(g, w)
    qb, kb = q.bfloat16(), k.bfloat16()
    for g, w in zip(
        nt.apply_rotary_pos_emb_interleave(qb, kb, cos.float(), sin.float()),
        hf.apply_rotary_pos_emb_interleave(qb, kb, cos.float(), sin.float()),
    ):
        assert g.dtype == w.dtype == torch.float32 and torch.equal(g, w)


@pytest.mark.parametrize(
    "dtype,interleave",
    [(torch.float32, True), (torch.bfloat16, True), (torch.float32, False)],
)
def test_deepseek_v3_model_uses_the_op(dtype, interleave, calls):
    """A tiny DeepSeek-V3 (MLA, MoE; rope_interleave=True is its default): patched, every layer's
    RoPE goes through rope_matrix_qk and the logits match; unpatched, HF's two functions are back
    and the logits are bit for bit the first run's."""
    hf = _modeling("deepseek_v3")
    orig = hf.apply_rotary_pos_emb, hf.apply_rotary_pos_emb_interleave
    model = _tiny_deepseek(dtype, rope_interleave=interleave)
    assert model.config.rope_interleave is interleave
    ids = _ids()
    with torch.no_grad():
        want = model(ids).logits
        assert nt.patch_transformers(model) == [hf.__name__]
        got = model(ids).logits
        assert len(calls) == 2, "the patched model did not call rope_matrix_qk once per layer"
        assert hf.apply_rotary_pos_emb is nt.apply_rotary_pos_emb
        assert hf.apply_rotary_pos_emb_interleave is nt.apply_rotary_pos_emb_interleave
        nt.unpatch_transformers(model)
        assert (hf.apply_rotary_pos_emb, hf.apply_rotary_pos_emb_interleave) == orig
        back = model(ids).logits
    assert len(calls) == 2, "the unpatched model still calls rope_matrix_qk"
    assert torch.equal(back, want)
    if dtype == torch.float32:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=_ulp_at(want, dtype))
    with nt.rope_matrix_enabled(model):
        assert hf.apply_rotary_pos_emb_interleave is nt.apply_rotary_pos_emb_interleave
    assert (hf.apply_rotary_pos_emb, hf.apply_rotary_pos_emb_interleave) == orig


#: Families whose modeling file has DeepSeek-V3's apply_rotary_pos_emb_interleave (transformers
#: 5.x; each skipped when absent).
INTERLEAVE_FAMILIES = [
    "deepseek_v32",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "longcat_flash",
    "mistral4",
    "youtu",
]


@pytest.mark.parametrize("family", INTERLEAVE_FAMILIES)
def test_interleave_families(family):
    try:
        mod = _modeling(family)
    except ImportError:
        pytest.skip(f"no {family} in this transformers")
    orig = {
        n: getattr(mod, n)
        for n in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave")
        if hasattr(mod, n)
    }
    assert nt.patch_transformers(family) == [mod.__name__]
    assert mod.apply_rotary_pos_emb_interleave is nt.apply_rotary_pos_emb_interleave
    nt.unpatch_transformers(family)
    assert all(getattr(mod, n) is f for n, f in orig.items())


def _older_interleave(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    # the form of earlier transformers releases: de-interleave, then rotate_half with both halves
    # of the tables
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)

    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)

    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    q_embed = (q * cos) + (_modeling("llama").rotate_half(q) * sin)
    k_embed = (k * cos) + (_modeling("llama").rotate_half(k) * sin)
    return q_embed, k_embed


def test_interleave_forms_it_does_not_compute_are_refused(monkeypatch):
    """A DeepSeek-V3 function of another form (here the earlier release's, which reads both halves
    of the tables) is refused rather than replaced by a drop-in that computes something else."""
    hf = _modeling("deepseek_v3")
    assert nt._computes_interleave(hf.apply_rotary_pos_emb_interleave)
    assert not nt._computes_interleave(_older_interleave)
    monkeypatch.setattr(hf, "apply_rotary_pos_emb_interleave", _older_interleave)
    monkeypatch.setattr(nt, "_STANDARD", {})
    with pytest.raises(ValueError, match="apply_rotary_pos_emb_interleave is none of the forms"):
        nt.patch_transformers(_tiny_deepseek())
    assert nt.patched_modules() == []
    assert hf.apply_rotary_pos_emb_interleave is _older_interleave
    try:
        large4 = _modeling("mistral_large4")
    except ImportError:
        return
    # Mistral-Large-4's has another signature (k may be None, no position_ids): refused as well
    with pytest.raises(ValueError, match="none of the forms"):
        nt.patch_transformers(large4)


def test_matrix_cached_in_inference_mode_serves_training(monkeypatch):
    """The rotate matrix the drop-ins cache, first made under torch.inference_mode(), is a normal
    tensor: a later training call can save it for backward."""
    monkeypatch.setattr(matrices, "_CACHED", {})
    q, k = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    cos, sin = torch.randn(1, 5, 16), torch.randn(1, 5, 16)
    with torch.inference_mode():
        want = nt.apply_rotary_pos_emb(q, k, cos, sin)
    qq = q.clone().requires_grad_()
    a, b = nt.apply_rotary_pos_emb(qq, k, cos, sin)
    (a.sum() + b.sum()).backward()
    assert torch.equal(a.detach(), want[0]) and qq.grad is not None


def test_a_family_that_defines_but_never_calls_the_function_is_not_reported_patched():
    # Jamba's modeling file defines HF's apply_rotary_pos_emb and never calls it (no RoPE):
    # patching the model was reported done while nothing changed
    import transformers as T

    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    jamba = importlib.import_module("transformers.models.jamba.modeling_jamba")
    assert nt._loads_global(llama, ["apply_rotary_pos_emb"])
    assert nt._rope_names(jamba) and not nt._loads_global(jamba, nt._rope_names(jamba))
    cfg = T.JambaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, attn_layer_period=1, attn_layer_offset=0,
                        expert_layer_period=2, num_experts=2, mamba_d_state=4, mamba_expand=1,
                        use_mamba_kernels=False)
    model = T.AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(TypeError, match="JambaForCausalLM is not a transformers model with a modeling file "
                       "that defines and calls apply_rotary_pos_emb"):
        nt.patch_transformers(model)
    assert "transformers.models.jamba.modeling_jamba" not in nt.patched_modules()
    # asked for by name, the family is patched as asked (and unpatched)
    assert nt.patch_transformers("jamba") == ["transformers.models.jamba.modeling_jamba"]
    nt.unpatch_transformers("jamba")
    assert "transformers.models.jamba.modeling_jamba" not in nt.patched_modules()
