// Declarations of the vector-only (signed permutation) entry points for host code that launches
// them on the CPU twin. (The NPU build launches them through the generated aclrtlaunch_* headers.)
#pragma once

#include <cstdint>

#define ROPE_MATRIX_PERM_DECLARE(name)                                                              \
  extern "C" void name(uint8_t* x, uint8_t* y, uint8_t* sin, uint8_t* cos, uint8_t* out, uint8_t* ws, \
                       uint8_t* tiling);
ROPE_MATRIX_PERM_DECLARE(rope_matrix_perm_bf16_bf16)
ROPE_MATRIX_PERM_DECLARE(rope_matrix_perm_bf16_fp32)
ROPE_MATRIX_PERM_DECLARE(rope_matrix_perm_fp16_fp16)
ROPE_MATRIX_PERM_DECLARE(rope_matrix_perm_fp16_fp32)
ROPE_MATRIX_PERM_DECLARE(rope_matrix_perm_fp32_fp32)
#undef ROPE_MATRIX_PERM_DECLARE
