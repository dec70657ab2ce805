// TEST-ONLY kernels, each with one deliberate defect, for tests/test_twin_violations.py: the twin
// must stop every one of them with exactly the expected rule. They take the production kernel's
// arguments (bf16 x, bf16 tables) and its tiling, and are never built into anything but the twin
// module, where they are reachable only through the test-only `variant=` selector.
#define ASCENDC_CUBE_ONLY  // before every Ascend C include
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "inc/rope_matrix_tiling.h"
#include "op_kernel/rope_matrix_kernel.h"

using namespace AscendC;
using rope_matrix::RopeMatrixTiling;

#define BROKEN_ENTRY(name)                                                                                     \
  extern "C" void name(GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR workspace, \
                       GM_ADDR tiling)

namespace {
struct Ctx {
  RopeMatrixTiling t;
  GlobalTensor<bfloat16_t> x, out;
};
Ctx load(GM_ADDR x, GM_ADDR out, GM_ADDR tiling) {
  Ctx c;
  rope_matrix::CopyTiling(&c.t, tiling);
  const uint64_t n = c.t.outer * c.t.s * c.t.inner * c.t.d;
  c.x.SetGlobalBuffer((__gm__ bfloat16_t*)x, n);
  c.out.SetGlobalBuffer((__gm__ bfloat16_t*)out, n);
  return c;
}
}  // namespace

// The cube core copies x into UB (on the NPU: silently skipped, the vector side reads garbage).
BROKEN_ENTRY(test_only_vector_op_on_cube) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  if ASCEND_IS_AIC {
    LocalTensor<bfloat16_t> ub;
    DataCopy(ub, c.x, 16);
  }
}

// A DataCopy (count form) of one D = 44 bf16 row: 88 bytes, not a multiple of 32.
BROKEN_ENTRY(test_only_datacopy_unaligned_length) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    LocalTensor<bfloat16_t> t = q.AllocTensor<bfloat16_t>();
    DataCopy(t, c.x, c.t.d);
    q.FreeTensor(t);
  }
}

// A DataCopy into a UB address 16 bytes past a buffer start.
BROKEN_ENTRY(test_only_ub_unaligned_address) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    LocalTensor<bfloat16_t> t = q.AllocTensor<bfloat16_t>();
    DataCopy(t[8], c.x, 16);
    q.FreeTensor(t);
  }
}

// float -> bf16 with CAST_NONE (illegal on A2: the NPU leaves dst unchanged).
BROKEN_ENTRY(test_only_cast_none_to_bf16) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> f, h;
    pipe.InitBuffer(f, 256);
    pipe.InitBuffer(h, 256);
    LocalTensor<float> a = f.Get<float>();
    LocalTensor<bfloat16_t> b = h.Get<bfloat16_t>();
    Cast(b, a, RoundMode::CAST_NONE, 64);
  }
}

// DeQue with nothing enqueued (on the NPU: waits for an event that never comes).
BROKEN_ENTRY(test_only_deque_empty) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 1024);
    LocalTensor<bfloat16_t> t = q.DeQue<bfloat16_t>();
    (void)t;
  }
}

// Three AllocTensor on a double-buffered queue without a FreeTensor.
BROKEN_ENTRY(test_only_alloc_past_depth) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 1024);
    LocalTensor<bfloat16_t> a = q.AllocTensor<bfloat16_t>();
    LocalTensor<bfloat16_t> b = q.AllocTensor<bfloat16_t>();
    LocalTensor<bfloat16_t> c = q.AllocTensor<bfloat16_t>();
    (void)a; (void)b; (void)c;
  }
}

// A VECOUT tensor written by a vector op after FreeTensor handed its buffer back.
BROKEN_ENTRY(test_only_use_after_free) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECOUT, 1> q;
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(q, 2, 1024);
    pipe.InitBuffer(f, 1024);
    LocalTensor<float> a = f.Get<float>();
    LocalTensor<float> o = q.AllocTensor<float>();
    q.FreeTensor(o);
    Add(o, a, a, 64);
  }
}

// The cube signals READY sixteen times before anyone waits: the counter range is 0..15.
BROKEN_ENTRY(test_only_flag_overflow) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    for (int i = 0; i < 16; ++i) CrossCoreSetFlag<0x2, PIPE_FIX>(rope_matrix::kFlagReady0);
  }
  if ASCEND_IS_AIV {
    for (int i = 0; i < 16; ++i) CrossCoreWaitFlag(rope_matrix::kFlagReady0);
  }
}

// The vectors answer READY on the wrong FREE id: the cube waits on flag 6 forever.
BROKEN_ENTRY(test_only_deadlock) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<0x2, PIPE_FIX>(rope_matrix::kFlagReady0);
    CrossCoreWaitFlag(rope_matrix::kFlagFree0);
  }
  if ASCEND_IS_AIV {
    CrossCoreWaitFlag(rope_matrix::kFlagReady0);
    CrossCoreSetFlag<0x2, PIPE_MTE2>(rope_matrix::kFlagFree0 + 1);
  }
}

// The cube signals but the vectors never wait: the flag is still raised at kernel end.
BROKEN_ENTRY(test_only_flag_unbalanced) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<0x2, PIPE_FIX>(rope_matrix::kFlagReady0);
  }
}
