// Vector-only entry points for a signed (partial) permutation y, one per (x dtype, table dtype)
// pair. The arguments are the MIX kernel's (y is not read: its partners and signs come with the
// tiling), so both kernels share the launcher and the generated workspace handling; `tiling`
// points to RopePermTiling followed by the Gather offsets and signs written by op_host.
#include "op_kernel/rope_matrix_perm_kernel.h"

#define ROPE_MATRIX_PERM_ENTRY(name, T, TT)                                                              \
  extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, \
                                             GM_ADDR workspace, GM_ADDR tiling) {                       \
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);                                                     \
    (void)y;                                                                                            \
    (void)workspace;                                                                                    \
    rope_matrix::RopeMatrixPermKernel<T, TT>(x, sin, cos, out, tiling);                                \
  }

ROPE_MATRIX_PERM_ENTRY(rope_matrix_perm_bf16_bf16, bfloat16_t, bfloat16_t)
ROPE_MATRIX_PERM_ENTRY(rope_matrix_perm_bf16_fp32, bfloat16_t, float)
ROPE_MATRIX_PERM_ENTRY(rope_matrix_perm_fp16_fp16, half, half)
ROPE_MATRIX_PERM_ENTRY(rope_matrix_perm_fp16_fp32, half, float)
ROPE_MATRIX_PERM_ENTRY(rope_matrix_perm_fp32_fp32, float, float)
