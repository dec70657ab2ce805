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

// An entry that runs `fn(ctx, sync)` on a Ctx of its arguments: a missing-sync case (`sync` false)
// or its synced version.
#define SYNC_CASE_ENTRY(name, fn, sync)              \
  BROKEN_ENTRY(name) {                               \
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2); \
    Ctx c = load(x, out, tiling);                    \
    fn(c, sync);                                     \
  }
// The missing-sync case `broken` and its synced version `synced` (which must pass).
#define SYNC_CASE_PAIR(broken, synced, fn) \
  SYNC_CASE_ENTRY(broken, fn, false)       \
  SYNC_CASE_ENTRY(synced, fn, true)

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

// On every vector core: `copy(t)` on a freshly allocated VECIN tensor of `bytes` bytes, freed after.
template <class F>
void copy_into_vecin(uint32_t bytes, F copy) {
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, bytes);
    LocalTensor<bfloat16_t> t = q.AllocTensor<bfloat16_t>();
    copy(t);
    q.FreeTensor(t);
  }
}

// One DataCopyPad of the D-element row of `src` that starts at `elem` into `t`.
void pad_copy_row(Ctx& c, const LocalTensor<bfloat16_t>& t, const GlobalTensor<bfloat16_t>& src, uint64_t elem = 0) {
  DataCopyExtParams p{1, static_cast<uint32_t>(c.t.d * sizeof(bfloat16_t)), 0, 0, 0};
  DataCopyPadExtParams<bfloat16_t> pad{false, 0, 0, bfloat16_t{}};
  DataCopyPad(t, src[elem], p, pad);
}

// On every vector core: one DataCopyPad of x with `p` and `pad` into a fresh VECIN tensor.
void pad_copy_into_vecin(Ctx& c, uint32_t bytes, const DataCopyExtParams& p, const DataCopyPadExtParams<bfloat16_t>& pad) {
  copy_into_vecin(bytes, [&](LocalTensor<bfloat16_t>& t) { DataCopyPad(t, c.x, p, pad); });
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
  copy_into_vecin(1024, [&](LocalTensor<bfloat16_t>& t) {
    DataCopy(t, c.x, c.t.d);
  });
}

// A DataCopy into a UB address 16 bytes past a buffer start.
BROKEN_ENTRY(test_only_ub_unaligned_address) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  copy_into_vecin(1024, [&](LocalTensor<bfloat16_t>& t) {
    DataCopy(t[8], c.x, 16);
  });
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

// ShiftLeft of uint16_t by 17 (A2 takes [0, 16] for 16-bit elements).
BROKEN_ENTRY(test_only_shift_out_of_range) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(f, 256);
    LocalTensor<uint16_t> a = f.Get<uint16_t>();
    ShiftLeft(a, a, static_cast<uint16_t>(17), 128);
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

// Mode 2: AIV_0 answers FREE twice, AIV_1 never. The cube's counter rises only when BOTH vector
// cores have set, so the cube waits forever (a twin counting sets per block would let it pass).
BROKEN_ENTRY(test_only_mode2_one_vector_sets_twice) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    CrossCoreWaitFlag(rope_matrix::kFlagFree0);
  }
  if ASCEND_IS_AIV {
    if (GetBlockIdx() == 0) {
      CrossCoreSetFlag<0x2, PIPE_MTE2>(rope_matrix::kFlagFree0);
      CrossCoreSetFlag<0x2, PIPE_MTE2>(rope_matrix::kFlagFree0);
    }
  }
}

// Flag 15 carries the Matmul API's KFC messages: a user set would corrupt them.
BROKEN_ENTRY(test_only_flag_15_reserved) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<0x2, PIPE_FIX>(15);
  }
}

// Flags 11..14 belong to SyncAll: a wait on one takes SyncAll's signal.
BROKEN_ENTRY(test_only_wait_syncall_flag) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    CrossCoreWaitFlag(12);
  }
}

// eventID 6 is reserved on A2 (and 7 is TPipe's): a kernel's own SetFlag must not take it.
BROKEN_ENTRY(test_only_event_id_reserved) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    SetFlag<HardEvent::MTE2_V>(6);
    WaitFlag<HardEvent::MTE2_V>(6);
  }
}

// A Gather whose dst is its src (they must not alias).
BROKEN_ENTRY(test_only_gather_alias) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> f, o;
    pipe.InitBuffer(f, 256);
    pipe.InitBuffer(o, 256);
    LocalTensor<float> a = f.Get<float>();
    LocalTensor<uint32_t> off = o.Get<uint32_t>();
    Gather(a, a, off, 0, 64);
  }
}

// A GlobalTensor<float> 2 bytes into x: GM addresses must be aligned to the element size.
BROKEN_ENTRY(test_only_gm_unaligned) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<float> g;
  g.SetGlobalBuffer((__gm__ float*)(x + 2), 16);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 64);
    LocalTensor<float> t = q.AllocTensor<float>();
    DataCopy(t, g, 8);
    q.FreeTensor(t);
  }
}

// SetFlag twice on one (event, id) without a WaitFlag between: the flag is a bit, not a counter.
BROKEN_ENTRY(test_only_event_double_set) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    SetFlag<HardEvent::MTE2_V>(0);
    SetFlag<HardEvent::MTE2_V>(0);
  }
}

// WaitFlag with no SetFlag before it: the pipe would wait forever.
BROKEN_ENTRY(test_only_event_wait_unset) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    WaitFlag<HardEvent::MTE2_V>(0);
  }
}

// PipeBarrier on the scalar pipe, which it does not take.
BROKEN_ENTRY(test_only_pipe_barrier_s) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    PipeBarrier<PIPE_S>();
  }
}

// A V -> M event on a vector core, which has no cube pipe: the wait orders nothing there.
BROKEN_ENTRY(test_only_event_v_m_on_vector) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    SetFlag<HardEvent::V_M>(0);
    WaitFlag<HardEvent::V_M>(0);
  }
}

// An MTE1 -> V event on the cube core, which has no vector pipe.
BROKEN_ENTRY(test_only_event_mte1_v_on_cube) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    SetFlag<HardEvent::MTE1_V>(0);
    WaitFlag<HardEvent::MTE1_V>(0);
  }
}

// A barrier on the cube pipe M issued by a vector core.
BROKEN_ENTRY(test_only_pipe_barrier_m_on_vector) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    PipeBarrier<PIPE_M>();
  }
}

// A cross-core set a vector core issues on PIPE_FIX, a pipe only the cube core has.
BROKEN_ENTRY(test_only_crosscore_set_on_fix_from_vector) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    CrossCoreSetFlag<0x2, PIPE_FIX>(rope_matrix::kFlagFree0);
  }
  if ASCEND_IS_AIC {
    CrossCoreWaitFlag(rope_matrix::kFlagFree0);
  }
}

// Passes: the events the A2 API skips on each side (vector events and PipeBarrier<PIPE_V> on the
// cube core, cube events on a vector core) and the core's own events and barriers.
BROKEN_ENTRY(test_only_core_events_pass) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    SetFlag<HardEvent::MTE2_V>(0);
    WaitFlag<HardEvent::MTE2_V>(0);
    PipeBarrier<PIPE_V>();
    SetFlag<HardEvent::MTE2_MTE1>(0);
    WaitFlag<HardEvent::MTE2_MTE1>(0);
    PipeBarrier<PIPE_FIX>();
  }
  if ASCEND_IS_AIV {
    SetFlag<HardEvent::M_FIX>(0);
    WaitFlag<HardEvent::M_FIX>(0);
    SetFlag<HardEvent::S_MTE3>(0);
    WaitFlag<HardEvent::S_MTE3>(0);
    PipeBarrier<PIPE_MTE2>();
  }
}

// A cross-core set issued on PIPE_S: only V, M, MTE1, MTE2, MTE3 and FIX may issue it.
BROKEN_ENTRY(test_only_crosscore_set_on_pipe_s) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    CrossCoreSetFlag<0x2, PIPE_S>(1);
  }
}

// A second TPipe while one is alive on the core.
BROKEN_ENTRY(test_only_two_tpipes) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TPipe a;
    TPipe b;
  }
}

// AllocTensor from a queue that InitBuffer never gave a buffer.
BROKEN_ENTRY(test_only_alloc_before_init) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    LocalTensor<float> t = q.AllocTensor<float>();
    q.FreeTensor(t);
  }
}

// A tensor freed into a queue it was not allocated from.
BROKEN_ENTRY(test_only_free_into_other_queue) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q1, q2;
    pipe.InitBuffer(q1, 1, 256);
    pipe.InitBuffer(q2, 1, 256);
    LocalTensor<float> t = q1.AllocTensor<float>();
    q2.FreeTensor(t);
  }
}

// A vector op with a negative count.
BROKEN_ENTRY(test_only_vector_count_negative) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TPipe pipe;
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(f, 256);
    LocalTensor<float> a = f.Get<float>();
    Add(a, a, a, -1);
  }
}

// A vector op whose dst overlaps a source 32 bytes further on: only dst == src is allowed.
BROKEN_ENTRY(test_only_vector_partial_overlap) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TPipe pipe;
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(f, 1024);
    LocalTensor<float> a = f.Get<float>();
    Duplicate(a, 1.0f, 128);
    Add(a[8], a, a, 64);
  }
}

// A UB queue on the cube core, which has no UB.
BROKEN_ENTRY(test_only_ub_on_cube) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIC {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 256);
  }
}

// A vector op on a LocalTensor that no TQue/TBuf gave out (default-constructed).
BROKEN_ENTRY(test_only_default_local_tensor) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    LocalTensor<float> a;
    Duplicate(a, 1.0f, 8);
  }
}

// A queue used with no TPipe alive on the core.
BROKEN_ENTRY(test_only_alloc_without_tpipe) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    LocalTensor<float> t = q.AllocTensor<float>();
    q.FreeTensor(t);
  }
}

// One DataCopyPad of 4096 rows: the A2 limit is 4095 blocks per copy.
BROKEN_ENTRY(test_only_datacopy_block_count) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  pad_copy_into_vecin(c, 4096 * 32, DataCopyExtParams{4096, 2, 0, 0, 0},
                      DataCopyPadExtParams<bfloat16_t>{false, 0, 0, bfloat16_t{}});
}

// GM -> UB straight into a TBuf<VECCALC>: A2 copies GM -> UB only into VECIN / VECOUT buffers.
BROKEN_ENTRY(test_only_datacopy_into_vecalc) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 1024);
    pad_copy_row(c, b.Get<bfloat16_t>(), c.x);
  }
}

// The vectors read a workspace slot the cube never filled (no READY wait, no matmul).
BROKEN_ENTRY(test_only_uninitialized_workspace_read) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIV {
    GlobalTensor<bfloat16_t> ws;
    ws.SetGlobalBuffer((__gm__ bfloat16_t*)GetUserWorkspace(workspace), c.t.slotElems);
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    LocalTensor<bfloat16_t> t = q.AllocTensor<bfloat16_t>();
    DataCopyExtParams p{1, static_cast<uint32_t>(c.t.d * sizeof(bfloat16_t)), 0, 0, 0};
    DataCopyPadExtParams<bfloat16_t> pad{false, 0, 0, bfloat16_t{}};
    DataCopyPad(t, ws, p, pad);
    q.FreeTensor(t);
  }
}

// A vector core writes the workspace (MTE3) and raises the flag on PIPE_MTE2: on the NPU the flag
// can be seen before the MTE3 writes land.
BROKEN_ENTRY(test_only_flag_pipe_mismatch) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIC {
    CrossCoreWaitFlag(rope_matrix::kFlagFree0);
  }
  if ASCEND_IS_AIV {
    GlobalTensor<float> ws;
    ws.SetGlobalBuffer((__gm__ float*)GetUserWorkspace(workspace), 64ull * 2 * GetBlockNum());
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, 256);
    LocalTensor<float> t = q.AllocTensor<float>();
    Duplicate(t, 1.0f, 64);
    q.EnQue(t);
    t = q.DeQue<float>();
    DataCopyExtParams p{1, 64 * sizeof(float), 0, 0, 0};
    DataCopyPad(ws[GetBlockIdx() * 64], t, p);
    q.FreeTensor(t);
    CrossCoreSetFlag<0x2, PIPE_MTE2>(rope_matrix::kFlagFree0);
  }
}

// ---- pipe-race: two pipes touch the same UB bytes with no synchronisation between them ----------
// `sync` selects the correct version (used by tests to show the rule is about the missing sync).

namespace {
// RAW: MTE2 copies x into a TBuf (no queue, so no implied event) and V reads it at once.
void tbuf_read_after_copy(Ctx& c, bool sync) {
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECIN> in;
    TBuf<TPosition::VECCALC> f;
    pipe.InitBuffer(in, 1024);
    pipe.InitBuffer(f, 2048);
    LocalTensor<bfloat16_t> t = in.Get<bfloat16_t>();
    pad_copy_row(c, t, c.x);
    if (sync) {
      SetFlag<HardEvent::MTE2_V>(0);
      WaitFlag<HardEvent::MTE2_V>(0);
    }
    LocalTensor<float> a = f.Get<float>();
    Cast(a, t, RoundMode::CAST_NONE, c.t.d);
  }
}

// A TBuf of 64 floats set to 0 (V), its first 64 bf16 copied to the core's out row (MTE3) once the
// V -> MTE3 event allows; then `then(f, o, p)` with the float and bf16 views and the copy's params.
template <class Then>
void copy_out_tbuf(Ctx& c, Then then) {
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(b, 1024);
    LocalTensor<float> f = b.Get<float>();
    Duplicate(f, 0.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0);
    WaitFlag<HardEvent::V_MTE3>(0);
    LocalTensor<bfloat16_t> o = f.ReinterpretCast<bfloat16_t>();
    DataCopyExtParams p{1, 64 * sizeof(bfloat16_t), 0, 0, 0};
    DataCopyPad(c.out[GetBlockIdx() * c.t.d], o, p);
    then(f, o, p);
  }
}

// WAR: MTE3 copies a TBuf out to GM and V overwrites the TBuf before that copy is known done.
void overwrite_after_copy_out(Ctx& c, bool sync) {
  copy_out_tbuf(c, [&](LocalTensor<float>& f, LocalTensor<bfloat16_t>&, DataCopyExtParams&) {
    if (sync) PipeBarrier<PIPE_ALL>();
    Duplicate(f, 1.0f, 64);
  });
}
}  // namespace

SYNC_CASE_PAIR(test_only_pipe_race_tbuf_read, test_only_synced_tbuf_read, tbuf_read_after_copy)
SYNC_CASE_PAIR(test_only_pipe_race_overwrite_after_copy_out, test_only_synced_overwrite_after_copy_out,
               overwrite_after_copy_out)

// UB initcheck: an Add of a filled TBuf and a TBuf nothing wrote, copied out to GM. (Vector ops
// may compute on unwritten UB, as padding columns do; what reaches GM must have been written.)
BROKEN_ENTRY(test_only_ub_uninitialized_reaches_gm) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECCALC> a, b;
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    pipe.InitBuffer(q, 1, 256);
    LocalTensor<float> fa = a.Get<float>();
    LocalTensor<float> fb = b.Get<float>();
    Duplicate(fa, 1.0f, 64);
    Duplicate(fb, 2.0f, 32);  // the second half of b stays unwritten
    LocalTensor<float> o = q.AllocTensor<float>();
    Add(o, fa, fb, 64);
    q.EnQue(o);
    o = q.DeQue<float>();
    DataCopyExtParams p{1, 64 * sizeof(bfloat16_t), 0, 0, 0};
    DataCopyPad(c.out[GetBlockIdx() * c.t.d], o.ReinterpretCast<bfloat16_t>(), p);
    PipeBarrier<PIPE_MTE3>();  // the second copy rewrites the first one's GM bytes
    DataCopyExtParams p2{1, 128 * sizeof(bfloat16_t), 0, 0, 0};
    DataCopyPad(c.out[GetBlockIdx() * c.t.d], o.ReinterpretCast<bfloat16_t>(), p2);
    q.FreeTensor(o);
  }
}

// ---- same-pipe-overlap: two copies of one pipe with overlapping destinations, no PipeBarrier ------
// `sync` selects the correct version (PipeBarrier<PIPE_MTE2> / <PIPE_MTE3> between the copies).

namespace {
// Two GM -> UB copies into the same UB bytes: MTE2 may run them overlapped, either may land last.
void mte2_same_dst(Ctx& c, bool sync) {
  TPipe pipe;
  if ASCEND_IS_AIV {
    TBuf<TPosition::VECIN> in;
    pipe.InitBuffer(in, 1024);
    LocalTensor<bfloat16_t> t = in.Get<bfloat16_t>();
    pad_copy_row(c, t, c.x);
    if (sync) PipeBarrier<PIPE_MTE2>();
    pad_copy_row(c, t, c.x, c.t.d);
  }
}

// Two UB -> GM copies to overlapping bytes of the out row: MTE3 may run them overlapped, either may
// land last.
void mte3_same_dst(Ctx& c, bool sync) {
  copy_out_tbuf(c, [&](LocalTensor<float>&, LocalTensor<bfloat16_t>& o, DataCopyExtParams& p) {
    if (sync) PipeBarrier<PIPE_MTE3>();
    DataCopyPad(c.out[GetBlockIdx() * c.t.d + 32], o, p);
  });
}
}  // namespace

SYNC_CASE_PAIR(test_only_mte2_overlapping_dst, test_only_synced_mte2_overlapping_dst, mte2_same_dst)
SYNC_CASE_PAIR(test_only_mte3_overlapping_dst, test_only_synced_mte3_overlapping_dst, mte3_same_dst)

// ---- datacopy-range: a parameter struct's field outside its documented A2 range ------------------

// DataCopy with DataCopyParams of 4096 blocks (the field is uint16_t; A2 takes at most 4095).
BROKEN_ENTRY(test_only_datacopy_params_block_count) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  copy_into_vecin(4096 * 32, [&](LocalTensor<bfloat16_t>& t) {
    DataCopyParams p{4096, 1, 0, 0};
    DataCopy(t, c.x, p);
  });
}

// DataCopyPad of one 2 097 152-byte block (A2 takes at most 2 097 151 bytes per block).
BROKEN_ENTRY(test_only_datacopy_ext_block_len) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  pad_copy_into_vecin(c, 1024, DataCopyExtParams{1, 2097152, 0, 0, 0},
                      DataCopyPadExtParams<bfloat16_t>{false, 0, 0, bfloat16_t{}});
}

// DataCopyPad with 17 bf16 of right padding: 34 bytes, over the 32 each side may take.
BROKEN_ENTRY(test_only_datacopy_pad_too_wide) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  pad_copy_into_vecin(c, 1024, DataCopyExtParams{1, 64, 0, 0, 0},
                      DataCopyPadExtParams<bfloat16_t>{true, 0, 17, bfloat16_t{}});
}

// ---- the workspace argument, as the code ascendc_library generates passes it ---------------------

// The kernel adds the 16 MiB system part to its workspace argument as if it were the raw workspace:
// the generated wrapper already passes the user workspace (twin/kernel_wrapper.h).
BROKEN_ENTRY(test_only_workspace_offset_twice) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  if ASCEND_IS_AIV {
    GlobalTensor<bfloat16_t> ws;
    ws.SetGlobalBuffer((__gm__ bfloat16_t*)(workspace + (16u << 20)), c.t.slotElems);
  }
}

// Not broken: vector core 0 writes out[0] = 1.0 (bf16) when its workspace argument is the user
// workspace the wrapper passes (GetUserWorkspace of it gives it back, and it lies 16 MiB after
// GetSysWorkSpacePtr()), else 0.0.
BROKEN_ENTRY(test_only_probe_workspace_argument) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  if ASCEND_IS_AIV {
    if (GetBlockIdx() == 0) {
      const bool usr = GetUserWorkspace(workspace) == workspace && GetSysWorkSpacePtr() + (16u << 20) == workspace;
      c.out.SetValue(0, bfloat16_t::from_bits(usr ? 0x3f80 : 0));
    }
  }
}

// ---- the kernel type and the Matmul's set-up -----------------------------------------------------

namespace {
using MmBf16 = matmul::MatmulType<TPosition::GM, CubeFormat::ND, bfloat16_t>;
using MmBias = matmul::MatmulType<TPosition::GM, CubeFormat::ND, float>;
using MmBf16Untransposed = matmul::Matmul<MmBf16, MmBf16, MmBf16, MmBias>;
}  // namespace

// A cross-core set in a vector-only kernel: no cube core is there to be raised. (Launched as an
// AIV-only kernel, with the perm kernel's plan; it reads no tiling.)
BROKEN_ENTRY(test_only_crosscore_in_aiv_only) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
  CrossCoreSetFlag<0x2, PIPE_MTE3>(rope_matrix::kFlagFree0);
}

// REGIST_MATMUL_OBJ after the core's TPipe has given out a buffer: the Matmul's own set-up must
// come first.
BROKEN_ENTRY(test_only_matmul_regist_after_init_buffer) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIV {
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 256);
    TCubeTiling cube;
    rope_matrix::CopyTiling(&cube, tiling + sizeof(RopeMatrixTiling));
    MmBf16Untransposed mm;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &cube);
  }
}

// SetTensorA(x, true) on a Matmul whose A type is declared untransposed: A would be read as it lies.
BROKEN_ENTRY(test_only_matmul_transposed_a_undeclared) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  Ctx c = load(x, out, tiling);
  TPipe pipe;
  if ASCEND_IS_AIC {
    TCubeTiling cube;
    rope_matrix::CopyTiling(&cube, tiling + sizeof(RopeMatrixTiling));
    MmBf16Untransposed mm;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &cube);
    mm.SetTensorA(c.x, true);
  }
}

// A Matmul tiling whose usedCoreNum is above the SoC's cube cores (TCubeTiling: at most the core
// count).
BROKEN_ENTRY(test_only_matmul_used_cores_over_soc) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  TPipe pipe;
  if ASCEND_IS_AIC {
    TCubeTiling cube;
    rope_matrix::CopyTiling(&cube, tiling + sizeof(RopeMatrixTiling));
    cube.usedCoreNum = 64;
    MmBf16Untransposed mm;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &cube);
  }
}

// ---- pipe-race on the cube's L1 / L0: the production MIX kernel on a Matmul that forgets one wait --
// (the Matmul model's test hook, twin/matmul_pipes.h; the production kernel itself is the synced
// version: it passes).

#include "op_kernel/rope_matrix_kernel_entries.h"

namespace {
void mix_with_matmul_missing(int event, GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR workspace,
                             GM_ADDR tiling) {
  if ASCEND_IS_AIC {
    ::twin::test_only_drop_matmul_wait(event);
  }
  rope_matrix_bf16_bf16(x, y, sin, cos, out, workspace, tiling);
}
}  // namespace

// MTE1 reads the A block from L1 before MTE2's copy into it is known complete.
BROKEN_ENTRY(test_only_matmul_without_mte2_mte1_wait) {
  mix_with_matmul_missing(static_cast<int>(HardEvent::MTE2_MTE1), x, y, sin, cos, out, workspace, tiling);
}

// Mmad reads L0A before MTE1's load into it is known complete.
BROKEN_ENTRY(test_only_matmul_without_mte1_m_wait) {
  mix_with_matmul_missing(static_cast<int>(HardEvent::MTE1_M), x, y, sin, cos, out, workspace, tiling);
}

// FixPipe reads L0C before the Mmad into it is known complete.
BROKEN_ENTRY(test_only_matmul_without_m_fix_wait) {
  mix_with_matmul_missing(static_cast<int>(HardEvent::M_FIX), x, y, sin, cos, out, workspace, tiling);
}
