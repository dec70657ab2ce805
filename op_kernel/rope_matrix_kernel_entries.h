// Declarations of the kernel entry points for host code that launches them on the CPU twin.
// (The NPU build launches them through the aclrtlaunch_* headers that ascendc_library generates.)
#pragma once

#include <cstdint>

#define ROPE_MATRIX_DECLARE(name)                                                                   \
  extern "C" void name(uint8_t* x, uint8_t* y, uint8_t* sin, uint8_t* cos, uint8_t* out, uint8_t* ws, \
                       uint8_t* tiling);
ROPE_MATRIX_DECLARE(rope_matrix_bf16_bf16)
ROPE_MATRIX_DECLARE(rope_matrix_bf16_fp32)
ROPE_MATRIX_DECLARE(rope_matrix_fp16_fp16)
ROPE_MATRIX_DECLARE(rope_matrix_fp16_fp32)
ROPE_MATRIX_DECLARE(rope_matrix_fp32_fp32)
#undef ROPE_MATRIX_DECLARE
