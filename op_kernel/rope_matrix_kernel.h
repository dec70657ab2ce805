// The rope_matrix kernel, KERNEL_TYPE_MIX_AIC_1_2: out = x * cos + (x @ y) * sin.
//
// Cube core b (its S rows and outer heads: inc/rope_matrix_tiling.h): for each step (a block of
// stepRows S rows x a head group), those x rows @ y, one IterateAll per head -> workspace slot
// (step % 2), then flag READY. Vector core 2b+s: per step, wait
// READY and walk its half of the block in chunks of chunkRows rows: load the chunk's cos/sin rows
// (once per block when its half is one chunk), then for every head of the group load x and x@y,
// compute in fp32 (Cast, Mul, Mul, Add, Cast CAST_RINT), store out; then flag FREE so the cube may
// refill the slot. The cube runs one step ahead of the vectors (two slots), so
// matmul and vector work overlap. Rows, steps and offsets come from inc/rope_matrix_tiling.h.
//
// The same source compiles with bisheng for the NPU and with g++ against twin/include.
#pragma once

// The Matmul runs on the AIC alone (cube and vector code are split below). The macro selects the
// cube-only Matmul and must precede every Ascend C include.
#ifndef ASCENDC_CUBE_ONLY
#define ASCENDC_CUBE_ONLY
#endif
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "inc/rope_matrix_tiling.h"
#include "rope_matrix_vec_common.h"

namespace rope_matrix {

// Vector cores per cube core in a KERNEL_TYPE_MIX_AIC_1_2 launch. On a vector core GetBlockIdx()
// is cube * kVecPerCube + GetSubBlockIdx(); this spelling exists in every supported CANN version.
constexpr uint64_t kVecPerCube = 2;

template <typename T>
class RopeMatrixCube {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR ws, const RopeMatrixTiling& t, TCubeTiling* cube,
                              AscendC::TPipe* pipe) {
    t_ = t;
    const uint64_t xElems = t.outer * t.s * t.inner * t.d;
    xGm_.SetGlobalBuffer((__gm__ T*)x, xElems);
    yGm_.SetGlobalBuffer((__gm__ T*)y, static_cast<uint64_t>(t.d) * t.d);
    wsGm_.SetGlobalBuffer((__gm__ T*)ws, static_cast<uint64_t>(t.blockDim) * kSlots * t.slotElems);
    // GetSysWorkSpacePtr is declared at global scope by CANN (not in namespace AscendC).
    REGIST_MATMUL_OBJ(pipe, GetSysWorkSpacePtr(), mm_, cube);
  }

  __aicore__ inline void Process() {
    const uint64_t b = AscendC::GetBlockIdx();
    uint64_t sBegin, rows, oBegin, heads;
    CubeRows(t_, b, sBegin, rows);
    CubeHeads(t_, b, oBegin, heads);
    const uint64_t chunks = Steps(t_, rows);
    const uint64_t groups = HeadGroups(t_, heads);
    const uint64_t wsCore = b * kSlots * t_.slotElems;
    const uint64_t rowElems = t_.inner * t_.d;  // elements of one S row across the inner heads
    mm_.SetTensorB(yGm_);
    uint64_t step = 0;  // (chunk, head group) steps so far: the slot ring position
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t n = StepRows(t_, rows, c);
      const uint64_t s0 = sBegin + c * t_.stepRows;
      for (uint64_t g = 0; g < groups; ++g, ++step) {
        const uint32_t slot = static_cast<uint32_t>(step % kSlots);
        if (step >= kSlots) {
          // The vectors are done with what this slot held two steps ago.
          AscendC::CrossCoreWaitFlag(kFlagFree0 + slot);
        }
        uint64_t o0, on, i0, in;
        HeadGroup(t_, oBegin, heads, g, o0, on, i0, in);
        const uint64_t slotBase = wsCore + slot * t_.slotElems;
        if (in == t_.inner) {
          // Rows s0 .. s0+n of head o (all inner heads) are contiguous in x: one product per head.
          mm_.SetTail(static_cast<int>(n * t_.inner), static_cast<int>(t_.d), static_cast<int>(t_.d));
          for (uint64_t o = 0; o < on; ++o) {
            mm_.SetTensorA(xGm_[((o0 + o) * t_.s + s0) * rowElems]);
            mm_.IterateAll(wsGm_[slotBase + o * t_.headStride]);
          }
        } else {
          // A slice of the inner heads: one product per S row (the slice is contiguous in x).
          mm_.SetTail(static_cast<int>(in), static_cast<int>(t_.d), static_cast<int>(t_.d));
          for (uint64_t o = 0; o < on; ++o) {
            for (uint64_t r = 0; r < n; ++r) {
              mm_.SetTensorA(xGm_[((o0 + o) * t_.s + s0 + r) * rowElems + i0 * t_.d]);
              mm_.IterateAll(wsGm_[slotBase + o * t_.headStride + r * t_.innerChunk * t_.d]);
            }
          }
        }
        // FixPipe wrote the slot; raise READY once those writes are done.
        AscendC::CrossCoreSetFlag<0x2, PIPE_FIX>(kFlagReady0 + slot);
      }
    }
    // Consume the FREE signals of the last (up to two) steps so every counter ends at zero.
    const uint64_t tail = step < kSlots ? step : kSlots;
    for (uint64_t k = step - tail; k < step; ++k) {
      AscendC::CrossCoreWaitFlag(kFlagFree0 + static_cast<uint32_t>(k % kSlots));
    }
    mm_.End();
  }

 private:
  RopeMatrixTiling t_;
  AscendC::GlobalTensor<T> xGm_, yGm_, wsGm_;
  // `matmul::` is the spelling every supported CANN has (newer ones alias it to AscendC). The bias
  // type is given although no bias is used: its default (C's type, bf16 for bf16 x) is not a bias
  // type A2 allows.
  using MmT = matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, T>;
  using MmBias = matmul::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;
  matmul::Matmul<MmT, MmT, MmT, MmBias> mm_;
};

// T: x / y / out / workspace type; TT: sin / cos type (T or float).
template <typename T, typename TT>
class RopeMatrixVec {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR ws, const RopeMatrixTiling& t,
                              AscendC::TPipe* pipe) {
    t_ = t;
    const uint64_t xElems = t.outer * t.s * t.inner * t.d;
    xGm_.SetGlobalBuffer((__gm__ T*)x, xElems);
    outGm_.SetGlobalBuffer((__gm__ T*)out, xElems);
    wsGm_.SetGlobalBuffer((__gm__ T*)ws, static_cast<uint64_t>(t.blockDim) * kSlots * t.slotElems);
    sinGm_.SetGlobalBuffer((__gm__ TT*)sin, t.s * t.d);
    cosGm_.SetGlobalBuffer((__gm__ TT*)cos, t.s * t.d);
    const uint32_t tile = t.chunkRows * t.dPad;  // elements of one UB tile (row pitch dPad)
    pipe->InitBuffer(inX_, 2, tile * sizeof(T));
    pipe->InitBuffer(inR_, 2, tile * sizeof(T));
    pipe->InitBuffer(inCos_, 2, tile * sizeof(TT));
    pipe->InitBuffer(inSin_, 2, tile * sizeof(TT));
    pipe->InitBuffer(outQ_, 2, tile * sizeof(T));
    pipe->InitBuffer(xF_, tile * sizeof(float));
    pipe->InitBuffer(rF_, tile * sizeof(float));
    if constexpr (!AscendC::IsSameType<TT, float>::value) {
      pipe->InitBuffer(cosF_, tile * sizeof(float));
      pipe->InitBuffer(sinF_, tile * sizeof(float));
    }
    // UB gap (in 32-byte blocks) after each row so rows sit dPad elements apart.
    xGapBlocks_ = RowGapBlocks<T>(t.dPad, t.d);
    tGapBlocks_ = RowGapBlocks<TT>(t.dPad, t.d);
  }

  __aicore__ inline void Process() {
    const uint64_t sub = AscendC::GetSubBlockIdx();
    const uint64_t b = (AscendC::GetBlockIdx() - sub) / kVecPerCube;
    uint64_t sBegin, rows, oBegin, heads;
    CubeRows(t_, b, sBegin, rows);
    CubeHeads(t_, b, oBegin, heads);
    const uint64_t chunks = Steps(t_, rows);
    const uint64_t groups = HeadGroups(t_, heads);
    const uint64_t wsCore = b * kSlots * t_.slotElems;
    uint64_t step = 0;
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t stepN = StepRows(t_, rows, c);
      const bool headShare = SplitsHeads(stepN);  // one row: both vector cores, half the heads each
      uint64_t first = 0, n = stepN;
      if (!headShare) SubRows(stepN, sub, first, n);
      const uint64_t sStep = sBegin + c * t_.stepRows + first;
      // cos/sin rows: when this core's share of the step is one chunk they are loaded once for every
      // group; otherwise once per chunk of each group.
      const bool oneChunk = n <= t_.chunkRows;
      AscendC::LocalTensor<TT> cosT, sinT;
      AscendC::LocalTensor<float> cosF, sinF;
      if (oneChunk && n > 0) LoadTables(sStep, static_cast<uint32_t>(n), cosT, sinT, cosF, sinF);
      for (uint64_t g = 0; g < groups; ++g, ++step) {
        const uint32_t slot = static_cast<uint32_t>(step % kSlots);
        AscendC::CrossCoreWaitFlag(kFlagReady0 + slot);
        uint64_t o0, on, i0, in;
        HeadGroup(t_, oBegin, heads, g, o0, on, i0, in);
        // Slot offsets count from the group's first heads; this core's share may start later.
        uint64_t oS = o0, onS = on, iS = i0, inS = in;
        if (headShare) SubHeads(sub, oS, onS, iS, inS);
        const uint64_t slotBase = wsCore + slot * t_.slotElems;
        for (uint64_t r0 = 0; r0 < n; r0 += t_.chunkRows) {
          const uint32_t m = static_cast<uint32_t>(n - r0 < t_.chunkRows ? n - r0 : t_.chunkRows);
          if (!oneChunk) LoadTables(sStep + r0, m, cosT, sinT, cosF, sinF);
          const uint64_t rowElems = t_.inner * t_.d;
          for (uint64_t o = oS - o0; o < oS - o0 + onS; ++o) {
            for (uint64_t i = iS - i0; i < iS - i0 + inS; ++i) {
              const uint64_t xOff = ((o0 + o) * t_.s + sStep + r0) * rowElems + (i0 + i) * t_.d;
              const uint64_t wOff = slotBase + o * t_.headStride + (first + r0) * t_.innerChunk * t_.d + i * t_.d;
              CopyIn(xOff, wOff, m);
              Compute(cosF, sinF, m * t_.dPad);
              CopyOut(xOff, m);
            }
          }
          if (!oneChunk) FreeTables(cosT, sinT);
        }
        // The last reads of this slot were MTE2 copies: FREE is raised once they completed.
        AscendC::CrossCoreSetFlag<0x2, PIPE_MTE2>(kFlagFree0 + slot);
      }
      if (oneChunk && n > 0) FreeTables(cosT, sinT);
    }
  }

 private:

  // cos/sin rows [sRow, sRow + n), dPad apart in UB, as fp32 (a cast once when they are not).
  __aicore__ inline void LoadTables(uint64_t sRow, uint32_t n, AscendC::LocalTensor<TT>& cosT,
                                    AscendC::LocalTensor<TT>& sinT, AscendC::LocalTensor<float>& cosF,
                                    AscendC::LocalTensor<float>& sinF) {
    LoadTableRows(cosGm_, sinGm_, sRow, n, static_cast<uint32_t>(t_.d), static_cast<uint32_t>(t_.dPad),
                  tGapBlocks_, inCos_, inSin_, cosF_, sinF_, cosT, sinT, cosF, sinF);
  }

  __aicore__ inline void FreeTables(AscendC::LocalTensor<TT>& cosT, AscendC::LocalTensor<TT>& sinT) {
    inCos_.FreeTensor(cosT);
    inSin_.FreeTensor(sinT);
  }

  // n rows of D elements: x rows `inner * D` apart in GM, workspace rows `innerChunk * D` apart.
  __aicore__ inline void CopyIn(uint64_t xOff, uint64_t wOff, uint32_t n) {
    AscendC::DataCopyExtParams px{static_cast<uint16_t>(n), static_cast<uint32_t>(t_.d * sizeof(T)),
                                  static_cast<uint32_t>((t_.inner - 1) * t_.d * sizeof(T)), xGapBlocks_, 0};
    AscendC::DataCopyExtParams pw{static_cast<uint16_t>(n), static_cast<uint32_t>(t_.d * sizeof(T)),
                                  static_cast<uint32_t>((t_.innerChunk - 1) * t_.d * sizeof(T)), xGapBlocks_, 0};
    AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, T{}};
    AscendC::LocalTensor<T> xIn = inX_.template AllocTensor<T>();
    AscendC::DataCopyPad(xIn, xGm_[xOff], px, pad);
    inX_.EnQue(xIn);
    AscendC::LocalTensor<T> rIn = inR_.template AllocTensor<T>();
    AscendC::DataCopyPad(rIn, wsGm_[wOff], pw, pad);
    inR_.EnQue(rIn);
  }

  // out = x * cos + (x @ y) * sin in fp32, one rounding (CAST_RINT) to T.
  __aicore__ inline void Compute(const AscendC::LocalTensor<float>& cosF, const AscendC::LocalTensor<float>& sinF,
                                 uint32_t count) {
    AscendC::LocalTensor<T> xIn = inX_.template DeQue<T>();
    AscendC::LocalTensor<T> rIn = inR_.template DeQue<T>();
    AscendC::LocalTensor<T> outT = outQ_.template AllocTensor<T>();
    AscendC::LocalTensor<float> xF = xF_.template Get<float>();
    AscendC::LocalTensor<float> rF = rF_.template Get<float>();
    if constexpr (AscendC::IsSameType<T, float>::value) {
      AscendC::Mul(xF, xIn, cosF, count);
      AscendC::Mul(rF, rIn, sinF, count);
      AscendC::Add(outT, xF, rF, count);
    } else {
      AscendC::Cast(xF, xIn, AscendC::RoundMode::CAST_NONE, count);
      AscendC::Cast(rF, rIn, AscendC::RoundMode::CAST_NONE, count);
      AscendC::Mul(xF, xF, cosF, count);
      AscendC::Mul(rF, rF, sinF, count);
      AscendC::Add(xF, xF, rF, count);
      AscendC::Cast(outT, xF, AscendC::RoundMode::CAST_RINT, count);
    }
    inX_.FreeTensor(xIn);
    inR_.FreeTensor(rIn);
    outQ_.EnQue(outT);
  }

  __aicore__ inline void CopyOut(uint64_t xOff, uint32_t n) {
    StoreOutRows(outGm_, outQ_, xOff, n, static_cast<uint32_t>(t_.d), xGapBlocks_, t_.inner);
  }

  RopeMatrixTiling t_;
  uint32_t xGapBlocks_ = 0, tGapBlocks_ = 0;
  AscendC::GlobalTensor<T> xGm_, outGm_, wsGm_;
  AscendC::GlobalTensor<TT> sinGm_, cosGm_;
  AscendC::TQue<AscendC::TPosition::VECIN, 1> inX_, inR_, inCos_, inSin_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 1> outQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> xF_, rF_, cosF_, sinF_;
};

// The body every entry point shares.
template <typename T, typename TT>
__aicore__ inline void RopeMatrixKernel(GM_ADDR x, GM_ADDR y, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR workspace,
                                        GM_ADDR tiling) {
  RopeMatrixTiling t;
  CopyTiling(&t, tiling);
  GM_ADDR userWs = AscendC::GetUserWorkspace(workspace);
  AscendC::TPipe pipe;
  if ASCEND_IS_AIC {
    TCubeTiling cube;
    CopyTiling(&cube, tiling + sizeof(RopeMatrixTiling));
    RopeMatrixCube<T> op;
    op.Init(x, y, userWs, t, &cube, &pipe);
    op.Process();
  }
  if ASCEND_IS_AIV {
    RopeMatrixVec<T, TT> op;
    op.Init(x, sin, cos, out, userWs, t, &pipe);
    op.Process();
  }
}

}  // namespace rope_matrix
