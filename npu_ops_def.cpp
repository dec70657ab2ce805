// The operator schemas of npu_ops_transformer_ext: the one TORCH_LIBRARY block.
// Backends register implementations in their own files: cpu_kernel/ (CPU), torch_interface.cpp
// (PrivateUse1, NPU builds only). Autograd of the three ops is registered in C++
// (rope_matrix_autograd.cpp), rope_matrix_'s functionalization too (rope_matrix_functionalize.cpp);
// the fake (meta) kernels live in Python (python/npu_ops_transformer_ext/ops.py and autograd.py), and
// so do the backward helper ops' implementations (autograd.py).
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(npu_ops_transformer_ext, m) {
  // out = x * cos + (x @ mat) * sin, computed in fp32, rounded once to x.dtype.
  m.def("rope_matrix(Tensor x, Tensor mat, Tensor sin, Tensor cos) -> Tensor");
  // rope_matrix on q and k in one pass over the tables (q and k may differ in head count).
  m.def("rope_matrix_qk(Tensor q, Tensor k, Tensor mat, Tensor sin, Tensor cos) -> (Tensor, Tensor)");
  // In-place: x <- rope_matrix(x, mat, sin, cos).
  m.def("rope_matrix_(Tensor(a!) x, Tensor mat, Tensor sin, Tensor cos) -> ()");
  // rope_matrix_'s checks, then rope_matrix: what rope_matrix_ would write into x, as a new tensor
  // (rope_matrix_functionalize.cpp: rope_matrix_ under functionalization, e.g. torch.compile).
  m.def("_rope_matrix_inplace_value(Tensor x, Tensor mat, Tensor sin, Tensor cos) -> Tensor");
  // x-gradients used by autograd (implemented in Python, autograd.py, on top of the ops above):
  // grad * cos + (grad * sin) @ mat^T, one rope_matrix(grad, mat^T, sin', cos) call where possible.
  m.def("rope_matrix_backward(Tensor grad, Tensor mat, Tensor sin, Tensor cos) -> Tensor");
  m.def("rope_matrix_qk_backward(Tensor grad_q, Tensor grad_k, Tensor mat, Tensor sin, Tensor cos) -> (Tensor, Tensor)");
  // Diagnostic (CPU): which row kernel rope_matrix takes for these inputs, e.g.
  // "avx512_bf16/pairs/OOOO" (cpu_kernel/rope_matrix_cpu.cpp). Not part of the operator contract.
  m.def("_cpu_kernel_choice(Tensor x, Tensor mat, Tensor sin, Tensor cos) -> str");
  // Diagnostic (CPU): which per-CPU tuning the CPU kernel runs with, "amd-family-19h" or "default"
  // (cpu_kernel/cpu_tuning.cpp); x only selects the backend.
  m.def("_cpu_tuning(Tensor x) -> str");
}

// `import npu_ops_transformer_ext._C` loads this library, which runs the registrations above.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
