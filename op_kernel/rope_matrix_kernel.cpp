// Kernel entry points, one per (x dtype, table dtype) pair. Arguments are GM addresses; `tiling`
// points to the packed RopeMatrixTiling + TCubeTiling written by op_host.
#include "op_kernel/rope_matrix_kernel.h"

#define ROPE_MATRIX_ENTRY(name, T, TT)                                                                  \
  extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, \
                                             GM_ADDR workspace, GM_ADDR tiling) {                       \
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);                                                  \
    rope_matrix::RopeMatrixKernel<T, TT>(x, y, sin, cos, out, workspace, tiling);                      \
  }

ROPE_MATRIX_ENTRY(rope_matrix_bf16_bf16, bfloat16_t, bfloat16_t)
ROPE_MATRIX_ENTRY(rope_matrix_bf16_fp32, bfloat16_t, float)
ROPE_MATRIX_ENTRY(rope_matrix_fp16_fp16, half, half)
ROPE_MATRIX_ENTRY(rope_matrix_fp16_fp32, half, float)
ROPE_MATRIX_ENTRY(rope_matrix_fp32_fp32, float, float)
