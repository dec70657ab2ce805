"""Per-call path: a call that needs no gradient never enters Python below the op's entry point.

The autograd kernels of rope_matrix and rope_matrix_qk are C++ (rope_matrix_autograd.cpp). These
tests watch every Python function the interpreter enters during a call (sys.setprofile): only the
op object's own ``__call__`` (torch/_ops.py) may run. A Python autograd layer (torch.library's
autograd kernel, a setup_context, ...) would show up here.
"""
import sys

import npu_ops_transformer_ext  # noqa: F401
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix

_ops = torch.ops.npu_ops_transformer_ext


def _python_calls(fn):
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    # The op objects' __call__ (torch/_ops.py) and this helper's own frame are the entry points.
    return [c for c in seen if not c.endswith(("_ops.py:__call__", "test_percall.py:<lambda>"))]


def _inputs(requires_grad=False):
    x = torch.randn(1, 32, 1, 128).bfloat16()
    sin, cos = torch.randn(2, 1, 1, 1, 128).bfloat16().unbind(0)
    y = mode_matrix("half", [128], dtype=torch.bfloat16)
    if requires_grad:
        x.requires_grad_(True)
        sin.requires_grad_(True)
    return x, y, sin, cos


@pytest.mark.parametrize("ctx", ["grad", "no_grad", "inference_mode"])
def test_no_python_when_no_grad_is_needed(ctx):
    x, y, sin, cos = _inputs(requires_grad=ctx == "no_grad")
    k = x.detach().clone()
    manager = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[ctx]
    with manager():
        for call in (
            lambda: _ops.rope_matrix(x, y, sin, cos),
            lambda: _ops.rope_matrix.default(x, y, sin, cos),
            lambda: _ops.rope_matrix_qk(x, k, y, sin, cos),
        ):
            call()  # first call: plan cache, lazy imports
            assert _python_calls(call) == []
            out = call()
            outs = out if isinstance(out, tuple) else (out,)
            assert all(o.grad_fn is None and not o.requires_grad for o in outs)


def test_grad_needed_records_a_cpp_node_and_matches_reference():
    x, y, sin, cos = _inputs(requires_grad=True)
    out = _ops.rope_matrix(x, y, sin, cos)
    assert out.requires_grad and out.grad_fn is not None
    assert "RopeMatrixFn" in out.grad_fn.name()  # the C++ node, not a Python autograd.Function
    g = torch.randn_like(out)
    dx, dsin = torch.autograd.grad(out, (x, sin), g)
    # Independent fp32 reference of the gradient (half mode: x @ y = cat(-x2, x1)).
    xf, gf, sf, cf = x.detach().float(), g.float(), sin.detach().float(), cos.float()
    yf = y.float()
    ref_dx = gf * cf + (gf * sf) @ yf.t()
    ref_dsin = (gf * (xf @ yf).bfloat16().float()).sum(dim=(1,), keepdim=True)
    torch.testing.assert_close(dx.float(), ref_dx, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(dsin.float(), ref_dsin, atol=1e-1, rtol=2e-2)


def test_qk_grad_of_one_output_only():
    x, y, sin, cos = _inputs()
    q = x.float().requires_grad_(True)
    k = x.float().clone().requires_grad_(True)
    qo, _ko = _ops.rope_matrix_qk(q, k, y.float(), sin.float(), cos.float())
    (dq, dk) = torch.autograd.grad(qo.sum(), (q, k), allow_unused=True)
    ref = torch.ones_like(qo) * cos.float() + (torch.ones_like(qo) * sin.float()) @ y.float().t()
    torch.testing.assert_close(dq, ref)
    assert dk is None or torch.count_nonzero(dk) == 0
