"""diffusers_patch under torch.compile, and isolation between models of one process (tiny random
diffusers models, no downloads; skipped without diffusers)."""

import copy
import importlib.util

import pytest
import torch

HAS_DIFFUSERS = importlib.util.find_spec("diffusers") is not None
pytestmark = pytest.mark.skipif(not HAS_DIFFUSERS, reason="diffusers is not installed (optional)")

if HAS_DIFFUSERS:
    from npu_ops_transformer_ext import diffusers_patch as dp
    from npu_ops_transformer_ext import models
    from test_models import _count_calls, _tiny



class CountingBackend:
    """A torch.compile backend that runs the graph eagerly and counts, at run time, the calls of
    graphs that contain rope_matrix: proof that the compiled code executing is the patched one."""

    def __init__(self):
        self.compiles = 0
        self.rope_runs = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        has_op = any(
            n.op == "call_function" and str(n.target).startswith("npu_ops_transformer_ext.rope_matrix")
            for n in gm.graph.nodes
        )

        def run(*args):
            if has_op:
                self.rope_runs += 1
            return gm.forward(*args)

        return run


def _run(model, kw):
    with torch.no_grad():
        return model(**kw, return_dict=False)[0]


def _tiny_cogview4():
    import diffusers

    g = torch.Generator().manual_seed(1)
    m = diffusers.CogView4Transformer2DModel(
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        text_embed_dim=8,
        time_embed_dim=8,
        condition_dim=4,
        pos_embed_max_size=8,
        sample_size=8,
        rope_axes_dim=(8, 8),
    ).eval()
    kw = {
        "hidden_states": torch.randn(1, 4, 4, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, 3, 8, generator=g),
        "timestep": torch.tensor([500]),
        "original_size": torch.tensor([[8.0, 8.0]]),
        "target_size": torch.tensor([[8.0, 8.0]]),
        "crop_coords": torch.tensor([[0.0, 0.0]]),
    }
    return m, kw


def test_patching_one_model_leaves_other_models_alone(monkeypatch):
    # HunyuanVideo's and CogView4's processors both import diffusers.models.embeddings'
    # apply_rotary_emb at call time: patching one must not reroute the other.
    torch.manual_seed(0)
    cog, cog_kw = _tiny_cogview4()
    flux_a, flux_kw = _tiny("flux")
    flux_b, _ = _tiny("flux")
    hunyuan, _ = _tiny("hunyuan_video")
    want_cog, want_flux_b = _run(cog, cog_kw), _run(flux_b, flux_kw)
    calls = _count_calls(monkeypatch)
    dp.patch_rope(hunyuan)
    dp.patch_rope(flux_a)
    try:
        assert torch.equal(_run(cog, cog_kw), want_cog)
        assert torch.equal(_run(flux_b, flux_kw), want_flux_b)  # same family, never patched
        assert calls == [], "a model that was never patched called rope_matrix"
        _run(flux_a, flux_kw)
        assert calls, "the patched model did not call rope_matrix"
    finally:
        dp.unpatch_rope(hunyuan)
        dp.unpatch_rope(flux_a)


def test_diffusers_module_functions_are_never_replaced():
    import diffusers.models.embeddings as emb
    import diffusers.models.transformers.transformer_flux as tf
    import diffusers.models.transformers.transformer_qwenimage as tq

    before = (tf.apply_rotary_emb, emb.apply_rotary_emb, tq.apply_rotary_emb_qwen)
    patched = [dp.patch_rope(_tiny(f)[0]) for f in ("flux", "hunyuan_video", "qwen_image", "wan")]
    assert (tf.apply_rotary_emb, emb.apply_rotary_emb, tq.apply_rotary_emb_qwen) == before
    for m in patched:
        dp.unpatch_rope(m)
    assert (tf.apply_rotary_emb, emb.apply_rotary_emb, tq.apply_rotary_emb_qwen) == before


def test_unpatch_restores_the_same_processor_objects():
    model, _ = _tiny("flux")
    procs = {name: m.processor for name, m in model.named_modules() if hasattr(m, "processor")}
    dp.patch_rope(model)
    assert all(m.processor is not procs[n] for n, m in model.named_modules() if n in procs)
    dp.unpatch_rope(model)
    assert {n: m.processor for n, m in model.named_modules() if n in procs} == procs


def _procs(model):
    return dict(model.attn_processors)


@pytest.mark.parametrize("family", ["flux", "hunyuan_video", "qwen_image", "wan"])
def test_patch_again_after_set_attn_processor(family, monkeypatch):
    # What reloading a LoRA or an IP-Adapter does: the patched processors are replaced by new ones.
    # is_patched must say so, patch_rope must patch the new ones, unpatch_rope must give them back.
    torch.manual_seed(0)
    model, kw = _tiny(family)
    want = _run(model, kw)
    orig = _procs(model)
    dp.patch_rope(model)
    fresh = {n: copy.copy(p) for n, p in orig.items()}
    model.set_attn_processor(dict(fresh))  # (set_attn_processor empties the dict it is given)
    assert not dp.is_patched(model)
    calls = _count_calls(monkeypatch)
    assert torch.equal(_run(model, kw), want) and calls == []
    assert dp.patch_rope(model) is model and dp.is_patched(model)
    patched = _procs(model)
    dp.patch_rope(model)  # idempotent: nothing is replaced again
    assert all(p is patched[n] for n, p in _procs(model).items())
    got = _run(model, kw)
    assert calls, "patch_rope after set_attn_processor did not patch the new processors"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    n_calls = len(calls)
    dp.unpatch_rope(model)
    assert not dp.is_patched(model)
    back = _procs(model)
    assert all(back[n] is p for n, p in fresh.items()), "unpatch_rope did not restore the user's"
    assert all(type(back[n]) is type(p) for n, p in orig.items())
    assert torch.equal(_run(model, kw), want)
    assert len(calls) == n_calls, "the unpatched model still calls rope_matrix"


@pytest.mark.parametrize("family", ["flux", "hunyuan_video", "qwen_image", "wan"])
def test_unpatch_leaves_processors_set_after_patching_alone(family):
    model, kw = _tiny(family)
    want = _run(model, kw)
    orig = _procs(model)
    dp.patch_rope(model)
    fresh = {n: copy.copy(p) for n, p in orig.items()}
    model.set_attn_processor(dict(fresh))
    dp.unpatch_rope(model)  # nothing of ours is left: a no-op
    assert all(p is fresh[n] for n, p in _procs(model).items())
    assert not dp.is_patched(model)
    assert torch.equal(_run(model, kw), want)


def test_partial_replacement_and_shared_processors(monkeypatch):
    import diffusers

    model, kw = _tiny("flux")
    want = _run(model, kw)
    shared = diffusers.models.transformers.transformer_flux.FluxAttnProcessor()
    model.set_attn_processor(shared)  # one processor object in every attention module
    names = list(_procs(model))
    calls = _count_calls(monkeypatch)
    dp.patch_rope(model)
    patched = _procs(model)
    assert len({id(p) for p in patched.values()}) == len(names)  # a copy per module
    _run(model, kw)
    n_full = len(calls)
    assert n_full
    # One module gets a new processor after patching: the model is no longer (fully) patched.
    mine = diffusers.models.transformers.transformer_flux.FluxAttnProcessor()
    model.set_attn_processor({n: (mine if n == names[0] else patched[n]) for n in names})
    assert not dp.is_patched(model)
    dp.patch_rope(model)  # patches that one, keeps the others as they are
    assert dp.is_patched(model)
    again = _procs(model)
    assert again[names[0]] is not mine and all(again[n] is patched[n] for n in names[1:])
    torch.testing.assert_close(_run(model, kw), want, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2 * n_full  # every attention module rotated with rope_matrix again
    dp.unpatch_rope(model)
    back = _procs(model)
    assert back[names[0]] is mine and all(back[n] is shared for n in names[1:])
    assert torch.equal(_run(model, kw), want)
    # A patched processor object the user put into every module: each gets its original back.
    dp.patch_rope(model)
    model.set_attn_processor(_procs(model)[names[1]])
    assert dp.is_patched(model)
    dp.unpatch_rope(model)
    assert all(p is shared for p in _procs(model).values())


def test_rope_matrix_enabled_undoes_only_what_it_patched():
    model, _ = _tiny("flux")
    orig = _procs(model)
    names = list(orig)
    dp.patch_rope(model)
    kept = _procs(model)[names[1]]
    mine = copy.copy(orig[names[0]])
    model.set_attn_processor({names[0]: mine, names[1]: kept})
    with dp.rope_matrix_enabled(model):
        assert dp.is_patched(model)
        assert _procs(model)[names[1]] is kept
    after = _procs(model)
    assert after[names[0]] is mine and after[names[1]] is kept  # patched before the block: stays
    assert not dp.is_patched(model)
    dp.unpatch_rope(model)
    assert _procs(model) == orig | {names[0]: mine}


def test_overlapping_blocks_restore_when_the_last_block_exits():
    # Two blocks on one model that overlap without nesting: the first to exit must not unpatch
    # what the other still runs with; the last to exit restores diffusers' processors.
    model, _ = _tiny("flux")
    orig = _procs(model)
    first = dp.rope_matrix_enabled(model)
    second = dp.rope_matrix_enabled(model)
    first.__enter__()
    patched = _procs(model)
    second.__enter__()
    assert _procs(model) == patched
    first.__exit__(None, None, None)
    assert dp.is_patched(model), "the first block to exit unpatched the second block's model"
    assert _procs(model) == patched
    second.__exit__(None, None, None)
    assert not dp.is_patched(model) and _procs(model) == orig
    # The same, with a processor patched before the blocks: it stays patched.
    dp.patch_rope(model)
    before = _procs(model)
    first, second = dp.rope_matrix_enabled(model), dp.rope_matrix_enabled(model)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert _procs(model) == before
    dp.unpatch_rope(model)
    assert _procs(model) == orig


def test_nested_blocks_restore_when_the_outer_block_exits():
    model, _ = _tiny("flux")
    orig = _procs(model)
    names = list(orig)
    with dp.rope_matrix_enabled(model):
        patched = _procs(model)
        with dp.rope_matrix_enabled(model):
            assert _procs(model) == patched
        assert dp.is_patched(model) and _procs(model) == patched
        # A processor set inside the outer block, patched by an inner one: restored by the inner.
        mine = copy.copy(orig[names[0]])
        model.set_attn_processor({names[0]: mine, **{n: patched[n] for n in names[1:]}})
        with dp.rope_matrix_enabled(model):
            assert dp.is_patched(model)
        assert _procs(model)[names[0]] is mine
        model.set_attn_processor({n: patched[n] for n in names})
    assert not dp.is_patched(model) and _procs(model) == orig


_FAMILY_MODULE = {
    "flux": "diffusers.models.transformers.transformer_flux",
    "hunyuan_video": "diffusers.models.transformers.transformer_hunyuan_video",
    "qwen_image": "diffusers.models.transformers.transformer_qwenimage",
    "wan": "diffusers.models.transformers.transformer_wan",
}


@pytest.mark.parametrize("family", ["flux", "hunyuan_video", "qwen_image", "wan"])
def test_patched_model_sees_later_changes_to_diffusers_globals(family, monkeypatch):
    # What attention-backend libraries do: rebind a name in diffusers' module after models exist.
    # A patched model runs diffusers' code with only the rotation swapped, so it must see the new
    # binding too, as must a model patched after the rebinding.
    import importlib

    tmod = importlib.import_module(_FAMILY_MODULE[family])
    torch.manual_seed(0)
    patched_before, kw = _tiny(family)
    dp.patch_rope(patched_before)
    plain = copy.deepcopy(patched_before)
    dp.unpatch_rope(plain)
    hits = []
    orig = tmod.dispatch_attention_fn

    def counting(*args, **kwargs):
        hits.append(1)
        return orig(*args, **kwargs)

    monkeypatch.setattr(tmod, "dispatch_attention_fn", counting)
    patched_after = dp.patch_rope(copy.deepcopy(plain))
    calls = _count_calls(monkeypatch)
    try:
        for model, what in [
            (plain, "the unpatched model"),
            (patched_before, "a model patched before the rebinding"),
            (patched_after, "a model patched after the rebinding"),
        ]:
            hits.clear()
            _run(model, kw)
            assert hits, f"{what} did not call the rebound diffusers function"
        assert calls, "the patched models did not call rope_matrix"
    finally:
        dp.unpatch_rope(patched_before)
        dp.unpatch_rope(patched_after)


@pytest.mark.parametrize("graph_break", [False, True])
def test_compiled_patched_model_sees_later_changes_to_diffusers_globals(graph_break, monkeypatch):
    # Under torch.compile too, including when the rebound function breaks the graph inside the
    # patched __call__ (which dynamo then compiles as a frame of its own).
    import diffusers.models.transformers.transformer_flux as tf

    torch.manual_seed(0)
    model, kw = _tiny("flux")
    plain = copy.deepcopy(model)
    backend = CountingBackend()
    compiled = dp.patch_rope(torch.compile(model, backend=backend))
    want = _run(plain, kw)
    torch.testing.assert_close(_run(compiled, kw), want, rtol=1e-5, atol=1e-5)
    runs = backend.rope_runs
    assert runs
    orig = tf.dispatch_attention_fn

    def doubled(*args, **kwargs):
        if graph_break:
            torch._dynamo.graph_break()
        return orig(*args, **kwargs) * 2

    monkeypatch.setattr(tf, "dispatch_attention_fn", doubled)
    want2 = _run(plain, kw)
    assert not torch.allclose(want2, want)
    for _ in range(2):
        torch.testing.assert_close(_run(compiled, kw), want2, rtol=1e-5, atol=1e-5)
    assert backend.rope_runs > runs, "the compiled model no longer runs rope_matrix"
    monkeypatch.setattr(tf, "dispatch_attention_fn", orig)
    torch.testing.assert_close(_run(compiled, kw), want, rtol=1e-5, atol=1e-5)
    dp.unpatch_rope(compiled)


def test_unsupported_model_and_custom_processors_raise():
    with pytest.raises(TypeError, match="unsupported model Linear"):
        dp.patch_rope(torch.nn.Linear(2, 2))
    model, _ = _tiny("flux")

    class Custom:
        def __call__(self, attn, hidden_states, *a, **k):
            return hidden_states

    for m in model.modules():
        if hasattr(m, "processor"):
            m.processor = Custom()
    with pytest.raises(TypeError, match="custom processors are not patched"):
        dp.patch_rope(model)
    assert not dp.is_patched(model)


@pytest.mark.parametrize("family", ["wan"])
def test_patch_the_compiled_module(family):
    torch.manual_seed(0)
    model, kw = _tiny(family)
    want = _run(model, kw)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend)
    assert dp.patch_rope(compiled) is compiled
    assert dp.is_patched(compiled) and dp.is_patched(model)
    got = _run(compiled, kw)
    assert backend.rope_runs == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    dp.unpatch_rope(compiled)
    assert not dp.is_patched(model)
    back = _run(compiled, kw)
    assert backend.rope_runs == 1, "the unpatched compiled model still runs rope_matrix"
    torch.testing.assert_close(back, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "family,patch_inner",
    [("flux", True), ("hunyuan_video", False), ("qwen_image", True), ("wan", False)],
)
def test_patch_after_the_compiled_model_has_run(family, patch_inner):
    # The compiled code of the unpatched model is cached; patching must make the next call run the
    # patched code (recompiled), and unpatching must bring diffusers' code back.
    torch.manual_seed(0)
    model, kw = _tiny(family)
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend)
    want = _run(compiled, kw)
    assert backend.rope_runs == 0
    dp.patch_rope(model if patch_inner else compiled)
    got = _run(compiled, kw)
    assert backend.rope_runs == 1, "patching after compile silently kept diffusers' rotation"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    dp.unpatch_rope(compiled)
    _run(compiled, kw)
    assert backend.rope_runs == 1, "unpatching after compile silently kept rope_matrix"


def test_wan_rotation_equals_diffusers_in_bf16(monkeypatch):
    # Wan in bf16: diffusers' RoPE buffers are bf16 too. The patched model rotates with those same
    # bf16 tables in fp32 math rounded once, diffusers in bf16 steps: the outputs of the one-layer
    # model agree to within the figure documented in docs/models.md.
    torch.manual_seed(0)
    model, kw = _tiny("wan")
    model = model.to(torch.bfloat16)
    kw = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in kw.items()}
    want = _run(model, kw).float()
    with dp.rope_matrix_enabled(model):
        got = _run(model, kw).float()
    assert models is not None
    err = (got - want).abs().max().item()
    assert err <= 2 * 2**-8 * want.abs().max().item()


@pytest.mark.parametrize("family", ["flux", "wan"])
def test_a_patched_model_saves_and_loads_whole(family, tmp_path, monkeypatch):
    # torch.save of a whole patched model pickled processors whose class has diffusers' module and
    # name, which pickle refused (not the same object as diffusers' class); loaded, in this process
    # and in a fresh one, the model is patched still, gives the same bits, and unpatches
    import io

    model, kw = _tiny(family)
    want_orig = _run(model, kw)
    dp.patch_rope(model)
    want = _run(model, kw)
    buf = io.BytesIO()
    torch.save(model, buf)
    path = tmp_path / "m.pt"
    path.write_bytes(buf.getvalue())
    loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    calls = _count_calls(monkeypatch)
    assert torch.equal(_run(loaded, kw), want)
    assert calls, "the loaded model does not call the op"
    assert all(dp._is_ours(p) for p in _procs(loaded).values())
    dp.unpatch_rope(loaded)
    assert not any(dp._is_ours(p) for p in _procs(loaded).values())
    assert torch.equal(_run(loaded, kw), want_orig)
    # a fresh process that has not patched anything yet
    torch.save(kw, tmp_path / "kw.pt")
    torch.save(want, tmp_path / "want.pt")
    from fresh_python import fresh_env, run_python

    out = run_python(
        "import sys, torch\n"
        "from npu_ops_transformer_ext import diffusers_patch as dp\n"
        "m = torch.load(sys.argv[1], weights_only=False)\n"
        "kw = torch.load(sys.argv[2])\n"
        "with torch.no_grad():\n"
        "    got = m(**kw, return_dict=False)[0]\n"
        "procs = dict(m.attn_processors).values()\n"
        "print(all(dp._is_ours(p) for p in procs), torch.equal(got, torch.load(sys.argv[3])))\n",
        str(path), str(tmp_path / "kw.pt"), str(tmp_path / "want.pt"), env=fresh_env())
    assert out.split() == ["True", "True"]


def test_a_copy_of_a_patched_processor_is_patched():
    model, kw = _tiny("wan")
    dp.patch_rope(model)
    want = _run(model, kw)
    for twin_model in (copy.deepcopy(model), copy.copy(model)):
        assert all(dp._is_ours(p) for p in _procs(twin_model).values())
        assert torch.equal(_run(twin_model, kw), want)


if HAS_DIFFUSERS:
    from diffusers.models.transformers.transformer_flux import FluxAttnProcessor

    class _ProcWithNewargsEx(FluxAttnProcessor):
        """A processor made with keyword arguments to __new__ (pickled through __newobj_ex__)."""

        def __new__(cls, *, tag="t"):
            obj = super().__new__(cls)
            obj.tag = tag
            return obj

        def __init__(self, *, tag="t"):
            super().__init__()

        def __getnewargs_ex__(self):
            return (), {"tag": self.tag}

    class _ProcWithReduce(FluxAttnProcessor):
        """A processor whose own __reduce__ calls its class."""

        def __init__(self, scale=1.0):
            super().__init__()
            self.scale = scale

        def __reduce__(self):
            return type(self), (self.scale,)


@pytest.mark.parametrize("make", [lambda: _ProcWithNewargsEx(tag="x"), lambda: _ProcWithReduce(2.5)],
                         ids=["getnewargs_ex", "own_reduce"])
def test_patched_processors_of_user_classes_copy_and_pickle(make):
    # a processor pickled in another way than copyreg.__newobj__ (keyword __new__ arguments, its
    # own __reduce__) copies and pickles patched, with its state (the first failed in __new__)
    import pickle

    model, kw = _tiny("flux")
    model.set_attn_processor(make())
    dp.patch_rope(model)
    want = _run(model, kw)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model, protocol=2)),
                  pickle.loads(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))):
        procs = list(_procs(other).values())
        assert procs and all(dp._is_ours(p) for p in procs)
        assert all(getattr(p, "tag", None) == "x" or getattr(p, "scale", None) == 2.5 for p in procs)
        assert torch.equal(_run(other, kw), want)


def test_a_subclass_of_a_patched_class_pickles_by_its_own_name():
    import pickle
    import sys
    import types

    model, _ = _tiny("flux")
    dp.patch_rope(model)
    patched = type(next(iter(_procs(model).values())))
    home = types.ModuleType("_npu_ops_test_home")  # an importable home for the subclass
    sub = type("Sub", (patched,), {"__module__": home.__name__})
    home.Sub = sub
    sys.modules[home.__name__] = home
    try:
        obj = sub()
        obj.mark = 7
        for other in (copy.copy(obj), copy.deepcopy(obj), pickle.loads(pickle.dumps(obj))):
            assert type(other) is sub and other.mark == 7
    finally:
        del sys.modules[home.__name__]
