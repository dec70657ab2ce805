// The torch-level half of the NPU launcher, shared by torch_interface.cpp (NPU) and the CPU twin:
// the NPU-specific limits on top of the shared validator, and the [outer, S, inner, D] view.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "op_host/rope_matrix_tiling.h"

namespace rope_matrix {

// The kernel's inputs after the NPU-specific checks: contiguous tensors in the dtypes a kernel
// entry takes, the problem view, and the entry's name.
struct PreparedCall {
  at::Tensor x;        // contiguous, bf16 / fp16 / fp32
  at::Tensor y;        // [D, D] contiguous, x's dtype
  at::Tensor sin, cos; // [S, D] contiguous, both x's dtype or both float
  Problem problem;
  std::string kernel;  // MIX entry: "rope_matrix_bf16_bf16", ...
  std::string permKernel;  // vector-only entry: "rope_matrix_perm_bf16_bf16", ...
  bool empty = false;  // x has no elements: nothing to launch
  bool isPerm = false;           // y is a signed (partial) permutation
  std::vector<int32_t> partner;  // its partner per column (-1: all-zero column) ...
  std::vector<float> sign;       // ... and sign per column
};

// What one launch needs: the entry, blockDim, the tiling bytes and the workspace size.
struct LaunchPlan {
  NpuKernel kind = NpuKernel::MIX;
  std::string kernel;
  uint32_t blockDim = 0;
  std::vector<uint8_t> tiling;  // bytes the kernel's `tiling` argument points to
  uint64_t workspaceBytes = 0;  // system + user workspace
  RopeMatrixTiling mix{};       // valid when kind == MIX
  RopePermTiling perm{};        // valid when kind == PERM
};

// The kernel requested by NPU_OPS_NPU_KERNEL ("auto" when unset); throws c10 ValueError naming
// the variable and the valid values for anything else.
std::string requested_kernel_from_env();

// Chooses the kernel (see choose_kernel) and builds its tiling (the MIX kernel's matmul tiling on
// `ascendc`, the device's PlatformAscendC or the twin's). `requested`: auto, mix or perm.
// `patch` (tests only) may alter the MIX tiling before the matmul tiling is derived from it.
// Refusals name `op`.
LaunchPlan plan_launch(const PreparedCall& c, const Platform& plat, const platform_ascendc::PlatformAscendC& ascendc,
                       const std::string& requested,
                       uint32_t maxBlockDim = 0, uint64_t slotBytes = kSlotBytes,
                       const std::function<void(RopeMatrixTiling&)>& patch = nullptr, const char* op = "rope_matrix");

// Call after check_rope_matrix_inputs. Throws c10::Error naming `op`, the argument (x as `x_name`:
// q or k for rope_matrix_qk), expected and actual.
PreparedCall prepare_call(const char* op, const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                          const at::Tensor& cos, const char* x_name = "x");

}  // namespace rope_matrix
