// TEST-ONLY: the production MIX kernel's work with the original operator's schedule, for the timing
// model's calibration against the seed's 0.8 ms (docs/kernel.md, "Calibration"). Reachable only
// through the twin's test-only `variant=` selector; bf16 x and bf16 tables.
//
// The original: cube core b multiplies all of its S rows for every outer head, one IterateAll per
// head, into a workspace as large as x, and raises ONE flag after all of them; its two vector cores
// wait for that flag, then compute out chunk by chunk (cos/sin loaded once per chunk and reused for
// every head). Cube and vector work are serial. The numbers are the production kernel's.
#define ASCENDC_CUBE_ONLY  // before every Ascend C include
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "inc/rope_matrix_tiling.h"
#include "op_kernel/rope_matrix_vec_common.h"

using namespace AscendC;
using rope_matrix::RopeMatrixTiling;

namespace {
using T = bfloat16_t;
constexpr uint16_t kFlagDone = 8;  // the original's flag id

void cube(GM_ADDR x, GM_ADDR y, GM_ADDR ws, const RopeMatrixTiling& t, TCubeTiling* tiling, TPipe* pipe) {
  const uint64_t elems = t.outer * t.s * t.inner * t.d;
  GlobalTensor<T> xGm, yGm, wsGm;
  xGm.SetGlobalBuffer((__gm__ T*)x, elems);
  yGm.SetGlobalBuffer((__gm__ T*)y, static_cast<uint64_t>(t.d) * t.d);
  wsGm.SetGlobalBuffer((__gm__ T*)ws, elems);
  using MmT = matmul::MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using MmBias = matmul::MatmulType<TPosition::GM, CubeFormat::ND, float>;
  matmul::Matmul<MmT, MmT, MmT, MmBias> mm;
  REGIST_MATMUL_OBJ(pipe, GetSysWorkSpacePtr(), mm, tiling);
  uint64_t sBegin, rows;
  rope_matrix::CubeRows(t, GetBlockIdx(), sBegin, rows);
  mm.SetTensorB(yGm);
  mm.SetTail(static_cast<int>(rows * t.inner), static_cast<int>(t.d), static_cast<int>(t.d));
  for (uint64_t o = 0; o < t.outer; ++o) {
    const uint64_t off = (o * t.s + sBegin) * t.inner * t.d;
    mm.SetTensorA(xGm[off]);
    mm.IterateAll(wsGm[off]);
  }
  CrossCoreSetFlag<0x2, PIPE_FIX>(kFlagDone);
  mm.End();
}

void vec(GM_ADDR x, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR ws, const RopeMatrixTiling& t, TPipe* pipe) {
  const uint64_t elems = t.outer * t.s * t.inner * t.d;
  GlobalTensor<T> xGm, outGm, wsGm, sinGm, cosGm;
  xGm.SetGlobalBuffer((__gm__ T*)x, elems);
  outGm.SetGlobalBuffer((__gm__ T*)out, elems);
  wsGm.SetGlobalBuffer((__gm__ T*)ws, elems);
  sinGm.SetGlobalBuffer((__gm__ T*)sin, t.s * t.d);
  cosGm.SetGlobalBuffer((__gm__ T*)cos, t.s * t.d);
  const uint32_t tile = t.chunkRows * t.dPad;
  TQue<TPosition::VECIN, 1> inX, inR, inCos, inSin;
  TQue<TPosition::VECOUT, 1> outQ;
  TBuf<TPosition::VECCALC> xB, rB, cosB, sinB;
  pipe->InitBuffer(inX, 2, tile * sizeof(T));
  pipe->InitBuffer(inR, 2, tile * sizeof(T));
  pipe->InitBuffer(inCos, 2, tile * sizeof(T));
  pipe->InitBuffer(inSin, 2, tile * sizeof(T));
  pipe->InitBuffer(outQ, 2, tile * sizeof(T));
  pipe->InitBuffer(xB, tile * sizeof(float));
  pipe->InitBuffer(rB, tile * sizeof(float));
  pipe->InitBuffer(cosB, tile * sizeof(float));
  pipe->InitBuffer(sinB, tile * sizeof(float));
  const uint32_t gap = rope_matrix::RowGapBlocks<T>(t.dPad, t.d);
  const uint32_t rowBytes = t.d * sizeof(T), xStride = (t.inner - 1) * t.d * sizeof(T);
  const uint64_t sub = GetSubBlockIdx();
  uint64_t sBegin, rows, first, n;
  rope_matrix::CubeRows(t, (GetBlockIdx() - sub) / 2, sBegin, rows);
  rope_matrix::SubRows(rows, sub, first, n);
  CrossCoreWaitFlag(kFlagDone);
  for (uint64_t r0 = 0; r0 < n; r0 += t.chunkRows) {
    const uint32_t m = static_cast<uint32_t>(n - r0 < t.chunkRows ? n - r0 : t.chunkRows);
    const uint32_t count = m * t.dPad;
    const uint64_t sRow = sBegin + first + r0;
    LocalTensor<T> cosT, sinT;
    LocalTensor<float> cosF, sinF;
    rope_matrix::LoadTableRows(cosGm, sinGm, sRow, m, t.d, t.dPad, gap, inCos, inSin, cosB, sinB, cosT, sinT, cosF,
                               sinF);
    for (uint64_t o = 0; o < t.outer; ++o) {
      for (uint64_t i = 0; i < t.inner; ++i) {
        const uint64_t off = ((o * t.s + sRow) * t.inner + i) * t.d;
        DataCopyExtParams p{static_cast<uint16_t>(m), rowBytes, xStride, gap, 0};
        DataCopyPadExtParams<T> pad{false, 0, 0, T{}};
        LocalTensor<T> xIn = inX.AllocTensor<T>();
        DataCopyPad(xIn, xGm[off], p, pad);
        inX.EnQue(xIn);
        LocalTensor<T> rIn = inR.AllocTensor<T>();
        DataCopyPad(rIn, wsGm[off], p, pad);
        inR.EnQue(rIn);
        xIn = inX.DeQue<T>();
        rIn = inR.DeQue<T>();
        LocalTensor<T> o16 = outQ.AllocTensor<T>();
        LocalTensor<float> xF = xB.Get<float>(), rF = rB.Get<float>();
        Cast(xF, xIn, RoundMode::CAST_NONE, count);
        Cast(rF, rIn, RoundMode::CAST_NONE, count);
        Mul(xF, xF, cosF, count);
        Mul(rF, rF, sinF, count);
        Add(xF, xF, rF, count);
        Cast(o16, xF, RoundMode::CAST_RINT, count);
        inX.FreeTensor(xIn);
        inR.FreeTensor(rIn);
        outQ.EnQue(o16);
        rope_matrix::StoreOutRows(outGm, outQ, off, m, t.d, gap, t.inner);
      }
    }
    inCos.FreeTensor(cosT);
    inSin.FreeTensor(sinT);
  }
}
}  // namespace

extern "C" void test_only_original_schedule(GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out,
                                            GM_ADDR workspace, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  RopeMatrixTiling t;
  rope_matrix::CopyTiling(&t, tiling);
  GM_ADDR ws = GetUserWorkspace(workspace);
  TPipe pipe;
  if ASCEND_IS_AIC {
    TCubeTiling c;
    rope_matrix::CopyTiling(&c, tiling + sizeof(RopeMatrixTiling));
    cube(x, y, ws, t, &c, &pipe);
  }
  if ASCEND_IS_AIV {
    vec(x, sin, cos, out, ws, t, &pipe);
  }
}
