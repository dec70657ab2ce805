"""The CPU kernel's rotate-plan cache (cpu_kernel/rotate_plan.cpp, cached_rotate_plan): every way
of changing the matrix in place -- through torch ops, views, metadata, `.data` (as gradcheck does),
shared NumPy memory -- gives the result of the changed matrix, never a stale plan."""
import numpy as np
import pytest
import torch
from npu_ops_transformer_ext.reference import mode_matrix, rope_matrix_reference

op = torch.ops.npu_ops_transformer_ext.rope_matrix


def operands(dtype, d=64):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 5, d, generator=g).to(dtype)
    sin = torch.randn(5, d, generator=g).to(dtype)
    cos = torch.randn(5, d, generator=g).to(dtype)
    return x, sin, cos


def check(x, mat, sin, cos):
    """One call equals the reference of mat as it is now, bit for bit."""
    ref = rope_matrix_reference(x, mat.clone(), sin, cos)
    out = op(x, mat, sin, cos)
    assert torch.equal(out, ref)


def other_permutation(d, dtype):
    """A signed permutation that is neither the half nor the interleave matrix."""
    p = torch.randperm(d, generator=torch.Generator().manual_seed(3))
    m = torch.zeros(d, d)
    m[torch.arange(d), p] = torch.where(torch.arange(d) % 3 == 0, -1.0, 1.0)
    return m.to(dtype)


# Each change is an in-place edit of the matrix tensor the previous calls used.
CHANGES = {
    "mul_": lambda m: m.mul_(-1),
    "copy_": lambda m: m.copy_(mode_matrix("interleave", [m.shape[0]], dtype=m.dtype)),
    "one_entry": lambda m: m.__setitem__((0, 1), 2.0),
    "row_of_a_view": lambda m: m[3].zero_(),
    "t_": lambda m: m.t_(),
    "transpose_view_write": lambda m: m.t()[5].fill_(1.0),
    "set_": lambda m: m.set_(other_permutation(m.shape[0], m.dtype)),
    "zero_": lambda m: m.zero_(),
    "through_data": lambda m: m.data.__setitem__((2, 0), -1.0),  # no version counter advance
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("change", list(CHANGES))
def test_in_place_change_is_seen(dtype, change):
    x, sin, cos = operands(dtype)
    mat = mode_matrix("half", [x.shape[-1]], dtype=dtype)
    for _ in range(3):  # the first call compiles the plan, the next ones find it
        check(x, mat, sin, cos)
    CHANGES[change](mat)
    for _ in range(2):
        check(x, mat, sin, cos)


def test_changes_under_no_grad_and_inference_mode_are_seen():
    x, sin, cos = operands(torch.float32)
    mat = mode_matrix("half", [x.shape[-1]], dtype=torch.float32)
    check(x, mat, sin, cos)
    with torch.no_grad():
        mat.neg_()
    check(x, mat, sin, cos)
    with torch.inference_mode():
        mat.copy_(other_permutation(x.shape[-1], torch.float32))  # a normal tensor: version advances
        check(x, mat, sin, cos)
    check(x, mat, sin, cos)


def test_inference_tensor_changed_in_place():
    """Inference tensors have no version counter: the plan is found by the matrix's contents."""
    with torch.inference_mode():
        x, sin, cos = operands(torch.bfloat16)
        mat = mode_matrix("half", [x.shape[-1]], dtype=torch.bfloat16)
        check(x, mat, sin, cos)
        check(x, mat, sin, cos)
        mat.copy_(other_permutation(x.shape[-1], torch.bfloat16))
        check(x, mat, sin, cos)


def test_alternating_matrices_and_fresh_tensors():
    """Several matrices in turn, and a new tensor each call (possibly at a freed one's address)."""
    x, sin, cos = operands(torch.bfloat16)
    d = x.shape[-1]
    mats = [mode_matrix(m, [d], dtype=torch.bfloat16) for m in ("half", "interleave")]
    mats.append(other_permutation(d, torch.bfloat16))
    for i in range(9):
        check(x, mats[i % 3], sin, cos)
    for i in range(6):
        check(x, (mats[i % 3] * (-1) ** i).contiguous(), sin, cos)


def test_a_view_of_the_same_storage_with_other_strides():
    """The same storage seen through another tensor (transposed): a different matrix."""
    x, sin, cos = operands(torch.float32)
    mat = other_permutation(x.shape[-1], torch.float32)
    check(x, mat, sin, cos)
    check(x, mat.t(), sin, cos)
    check(x, mat, sin, cos)


def test_write_through_shared_numpy_memory_is_seen():
    x, sin, cos = operands(torch.float32)
    d = x.shape[-1]
    arr = mode_matrix("half", [d], dtype=torch.float32).numpy().copy()
    mat = torch.from_numpy(arr)
    check(x, mat, sin, cos)
    check(x, mat, sin, cos)
    arr[:] = other_permutation(d, torch.float32).numpy()
    check(x, mat, sin, cos)
    arr[4, 4] = np.float32(0.5)  # a dense matrix now
    check(x, mat, sin, cos)


@pytest.mark.parametrize("d", [64, 512])
def test_a_write_racing_a_call_leaves_no_wrong_plan_behind(d):
    """One thread calls the op with a matrix another thread keeps rewriting (the caller's data race:
    those calls' results are not checked). Once the race is over, calls with clean copies of the
    two matrices, in this thread and in new ones, must give their own results: a cache entry whose
    key was read from the matrix apart from its plan would give another matrix's plan (this failed
    within a second or two of racing before the key and plan were made from one copy)."""
    import threading
    import time

    # x's dtype: a mat of another dtype is converted, and the cache then sees a private copy
    a, b = mode_matrix("half", [d], dtype=torch.float32), mode_matrix("interleave", [d], dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    x, sin, cos = (torch.randn(1, 1, 4, d, generator=g) for _ in range(3))  # a call that is mostly the plan
    want_a, want_b = rope_matrix_reference(x, a, sin, cos), rope_matrix_reference(x, b, sin, cos)

    def fresh_thread_results():
        out = {}
        t = threading.Thread(target=lambda: out.update(a=op(x, a.clone(), sin, cos), b=op(x, b.clone(), sin, cos)))
        t.start()
        t.join()
        return out["a"], out["b"]

    shared, stop = a.clone(), threading.Event()

    def caller():
        while not stop.is_set():
            try:
                op(x, shared, sin, cos)
            except ValueError:  # the race may also meet a check of mat's contents: not the point here
                pass

    def writer():
        while not stop.is_set():
            shared.copy_(b)
            shared.copy_(a)

    threads = [threading.Thread(target=caller), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    deadline, ok = time.monotonic() + 3.0, True
    try:
        while ok and time.monotonic() < deadline:
            time.sleep(0.2)
            got_a, got_b = fresh_thread_results()
            ok = torch.equal(got_a, want_a) and torch.equal(got_b, want_b)
    finally:
        stop.set()
        for t in threads:
            t.join()
    got_a, got_b = fresh_thread_results()
    assert ok and torch.equal(got_a, want_a) and torch.equal(got_b, want_b)
    assert torch.equal(op(x, a.clone(), sin, cos), want_a) and torch.equal(op(x, b.clone(), sin, cos), want_b)
