// The torch-level half of the NPU launcher, shared by torch_interface.cpp (NPU) and the CPU twin:
// the NPU-specific limits on top of the shared validator, and the [outer, S, inner, D] view.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "op_host/rope_matrix_tiling.h"

namespace rope_matrix {

// The kernel's inputs after the NPU-specific checks: contiguous tensors in the dtypes a kernel
// entry takes, the problem view, and the entry's name.
struct PreparedCall {
  at::Tensor x;        // contiguous, bf16 / fp16 / fp32
  at::Tensor y;        // [D, D] contiguous, x's dtype
  at::Tensor sin, cos; // [S, D] contiguous, both x's dtype or both float
  Problem problem;
  std::string kernel;  // "rope_matrix_bf16_bf16", ...
  bool empty = false;  // x has no elements: nothing to launch
};

// Call after check_rope_matrix_inputs. Throws c10::Error naming argument, expected and actual.
PreparedCall prepare_call(const char* op, const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                          const at::Tensor& cos);

}  // namespace rope_matrix
