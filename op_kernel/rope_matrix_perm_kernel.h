// The rope_matrix vector-only kernel for a signed (partial) permutation y, KERNEL_TYPE_AIV_ONLY:
// out[j] = x[j] * cos[j] + x[partner[j]] * (sign[j] * sin[j]), no cube, no workspace.
//
// x @ y for such a y is an exact move and negation of elements, so no matmul is needed: the vector
// core reads x once, finds each element's partner in UB, and writes out once. Partners come, as the
// host chose (RopePermTiling::partnerPath), from one strided UB copy per run of columns whose
// partners lie the same distance away (half, quarter, 2D halves; when the runs are 32-byte aligned,
// see kMaxPermRuns), from swapping the two 16-bit halves of every 32-bit word of a 2-byte x tile
// (interleaved pairs), from one Gather of the 32-bit words of a 2-byte x tile (columns that move
// in pairs), or from one Gather of the fp32 x tile (byte offsets precomputed by the host for a
// whole tile, an all-zero column of y reads a +0 slot).
// The sign of y's column is folded into the sin row once per table row (an exact multiplication
// by +-1); cos/sin rows are loaded once per row chunk and reused for every head. The arithmetic is
// the CPU kernel's: fp32, x*cos, partner*sin, their sum, one rounding (CAST_RINT) to x's dtype,
// so Inf stays Inf, -0 stays -0 and a NaN reaches only its own and its partner's output.
//
// Work split (inc/rope_matrix_tiling.h, RopePermTiling): vector core v = GetBlockIdx() takes S rows
// of S-core v / oGroups and outer heads of group v % oGroups, in chunks of up to chunkRows rows.
//
// The same source compiles with bisheng for the NPU and with g++ against twin/include.
#pragma once

#include "kernel_operator.h"

#include "inc/rope_matrix_tiling.h"
#include "rope_matrix_vec_common.h"

namespace rope_matrix {

// T: x / out type; TT: sin / cos type (T or float).
template <typename T, typename TT>
class RopeMatrixPerm {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR tiling,
                              const RopePermTiling& t, AscendC::TPipe* pipe) {
    t_ = t;
    const uint64_t xElems = t.outer * t.s * t.inner * t.d;
    xGm_.SetGlobalBuffer((__gm__ T*)x, xElems);
    outGm_.SetGlobalBuffer((__gm__ T*)out, xElems);
    sinGm_.SetGlobalBuffer((__gm__ TT*)sin, t.s * t.d);
    cosGm_.SetGlobalBuffer((__gm__ TT*)cos, t.s * t.d);
    const uint32_t tile = t.chunkRows * t.dPad;  // elements of one UB tile (row pitch dPad)
    constGm_.SetGlobalBuffer((__gm__ uint32_t*)(tiling + t.constOffset), 2ull * tile + kPermRunWords);
    runCount_ = constGm_.GetValue(2ull * tile);
    for (uint32_t r = 0; r < runCount_ && r < kMaxPermRuns; ++r) {
      runDst_[r] = constGm_.GetValue(2ull * tile + 1 + 3 * r);
      runSrc_[r] = constGm_.GetValue(2ull * tile + 2 + 3 * r);
      runLen_[r] = constGm_.GetValue(2ull * tile + 3 + 3 * r);
    }
    pipe->InitBuffer(inX_, 2, tile * sizeof(T));
    pipe->InitBuffer(inCos_, 2, tile * sizeof(TT));
    pipe->InitBuffer(inSin_, 2, tile * sizeof(TT));
    pipe->InitBuffer(constQ_, 1, 2 * tile * sizeof(uint32_t));
    pipe->InitBuffer(outQ_, 2, tile * sizeof(T));
    pipe->InitBuffer(xF_, (tile + kZeroSlotElems) * sizeof(float));  // + the +0 slot of all-zero columns
    pipe->InitBuffer(pF_, tile * sizeof(float));
    if constexpr (!AscendC::IsSameType<TT, float>::value) {
      pipe->InitBuffer(cosF_, tile * sizeof(float));
      pipe->InitBuffer(sinF_, tile * sizeof(float));
    }
    xGapBlocks_ = RowGapBlocks<T>(t.dPad, t.d);
    tGapBlocks_ = RowGapBlocks<TT>(t.dPad, t.d);
    // Gather offsets (uint32 bytes into xF, per tile element) then signs (float +-1), one copy.
    AscendC::LocalTensor<uint32_t> c = constQ_.template AllocTensor<uint32_t>();
    AscendC::DataCopyExtParams cp{1, 2 * tile * static_cast<uint32_t>(sizeof(uint32_t)), 0, 0, 0};
    AscendC::DataCopyPadExtParams<uint32_t> cpad{false, 0, 0, 0};
    AscendC::DataCopyPad(c, constGm_, cp, cpad);
    constQ_.EnQue(c);
    consts_ = constQ_.template DeQue<uint32_t>();
    AscendC::LocalTensor<float> zero = xF_.template Get<float>();
    AscendC::Duplicate(zero[tile], 0.0f, static_cast<int32_t>(kZeroSlotElems));
  }

  __aicore__ inline void Process() {
    const uint64_t v = AscendC::GetBlockIdx();
    uint64_t sBegin, rows, oBegin, heads;
    PermCoreWork(t_, v, sBegin, rows, oBegin, heads);
    const uint32_t tile = t_.chunkRows * t_.dPad;
    AscendC::LocalTensor<uint32_t> offsets = consts_;
    AscendC::LocalTensor<float> sign = consts_[tile].template ReinterpretCast<float>();
    const uint64_t rowElems = t_.inner * t_.d;
    for (uint64_t r0 = 0; r0 < rows; r0 += t_.chunkRows) {
      const uint32_t n = static_cast<uint32_t>(rows - r0 < t_.chunkRows ? rows - r0 : t_.chunkRows);
      const uint32_t count = n * t_.dPad;
      const uint64_t sRow = sBegin + r0;
      AscendC::LocalTensor<TT> cosT, sinT;
      AscendC::LocalTensor<float> cosF, sinF;
      LoadTables(sRow, n, cosT, sinT, cosF, sinF);
      AscendC::Mul(sinF, sinF, sign, static_cast<int32_t>(count));  // the sign of y, once per table row
      for (uint64_t o = oBegin; o < oBegin + heads; ++o) {
        for (uint64_t i = 0; i < t_.inner; ++i) {
          const uint64_t xOff = (o * t_.s + sRow) * rowElems + i * t_.d;
          CopyIn(xOff, n);
          Compute(cosF, sinF, offsets, n);
          CopyOut(xOff, n);
        }
      }
      inCos_.FreeTensor(cosT);
      inSin_.FreeTensor(sinT);
    }
    constQ_.FreeTensor(consts_);
  }

 private:
  static constexpr uint32_t kZeroSlotElems = 8;  // one 32-byte block of fp32 zeros

  __aicore__ inline void LoadTables(uint64_t sRow, uint32_t n, AscendC::LocalTensor<TT>& cosT,
                                    AscendC::LocalTensor<TT>& sinT, AscendC::LocalTensor<float>& cosF,
                                    AscendC::LocalTensor<float>& sinF) {
    LoadTableRows(cosGm_, sinGm_, sRow, n, static_cast<uint32_t>(t_.d), static_cast<uint32_t>(t_.dPad),
                  tGapBlocks_, inCos_, inSin_, cosF_, sinF_, cosT, sinT, cosF, sinF);
  }

  // n rows of D elements, rows `inner * D` apart in GM.
  __aicore__ inline void CopyIn(uint64_t xOff, uint32_t n) {
    AscendC::DataCopyExtParams p{static_cast<uint16_t>(n), static_cast<uint32_t>(t_.d * sizeof(T)),
                                 static_cast<uint32_t>((t_.inner - 1) * t_.d * sizeof(T)), xGapBlocks_, 0};
    AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, T{}};
    AscendC::LocalTensor<T> xIn = inX_.template AllocTensor<T>();
    AscendC::DataCopyPad(xIn, xGm_[xOff], p, pad);
    inX_.EnQue(xIn);
  }

  // out = x * cos + partner(x) * signed sin in fp32, one rounding (CAST_RINT) to T; n rows.
  __aicore__ inline void Compute(const AscendC::LocalTensor<float>& cosF, const AscendC::LocalTensor<float>& sinF,
                                 const AscendC::LocalTensor<uint32_t>& offsets, uint32_t n) {
    const uint32_t count = n * t_.dPad;
    AscendC::LocalTensor<T> xIn = inX_.template DeQue<T>();
    AscendC::LocalTensor<float> xF = xF_.template Get<float>();
    AscendC::LocalTensor<float> pF = pF_.template Get<float>();
    if constexpr (AscendC::IsSameType<T, float>::value) {
      AscendC::DataCopy(xF, xIn, count);  // an exact copy next to the +0 slot
    } else {
      AscendC::Cast(xF, xIn, AscendC::RoundMode::CAST_NONE, count);
    }
    if (t_.partnerPath == kPermPathSwapHalves) {
      SwapHalves(xIn, pF, count);
    } else if (t_.partnerPath == kPermPathGatherWords) {
      GatherWords(xIn, pF, count);
    }
    inX_.FreeTensor(xIn);
    if (t_.partnerPath == kPermPathRuns) {
      // each run of partners: one copy of its columns for all n rows (rows dPad apart)
      for (uint32_t r = 0; r < runCount_; ++r) {
        const uint16_t gap = static_cast<uint16_t>((t_.dPad - runLen_[r]) / 8);
        AscendC::DataCopyParams p{static_cast<uint16_t>(n), static_cast<uint16_t>(runLen_[r] / 8), gap, gap};
        AscendC::DataCopy(pF[runDst_[r]], xF[runSrc_[r]], p);
      }
    } else if (t_.partnerPath == kPermPathGather) {
      AscendC::Gather(pF, xF, offsets, 0u, count);
    }
    AscendC::Mul(xF, xF, cosF, static_cast<int32_t>(count));
    AscendC::Mul(pF, pF, sinF, static_cast<int32_t>(count));
    AscendC::LocalTensor<T> outT = outQ_.template AllocTensor<T>();
    if constexpr (AscendC::IsSameType<T, float>::value) {
      AscendC::Add(outT, xF, pF, static_cast<int32_t>(count));
    } else {
      AscendC::Add(xF, xF, pF, static_cast<int32_t>(count));
      AscendC::Cast(outT, xF, AscendC::RoundMode::CAST_RINT, count);
    }
    outQ_.EnQue(outT);
  }

  // The partners of interleaved pairs (2i, 2i+1) of a 2-byte x: each 32-bit word of the x tile
  // with its two halves swapped ((w << 16) | (w >> 16)), then cast to fp32 into pF. The Gather
  // offsets' UB (unused on this path) holds the two shifted halves.
  __aicore__ inline void SwapHalves(const AscendC::LocalTensor<T>& xIn, const AscendC::LocalTensor<float>& pF,
                                    uint32_t count) {
    if constexpr (sizeof(T) == 2) {
      const uint32_t words = count / 2, tileWords = t_.chunkRows * t_.dPad / 2;
      AscendC::LocalTensor<uint32_t> w = xIn.template ReinterpretCast<uint32_t>();
      AscendC::LocalTensor<uint32_t> hi = consts_;
      AscendC::LocalTensor<uint32_t> lo = consts_[tileWords];
      AscendC::ShiftLeft(hi, w, static_cast<uint32_t>(16), static_cast<int32_t>(words));
      AscendC::ShiftRight(lo, w, static_cast<uint32_t>(16), static_cast<int32_t>(words));
      AscendC::LocalTensor<uint16_t> hi16 = hi.template ReinterpretCast<uint16_t>();
      AscendC::Or(hi16, hi16, lo.template ReinterpretCast<uint16_t>(), static_cast<int32_t>(count));
      AscendC::Cast(pF, hi.template ReinterpretCast<T>(), AscendC::RoundMode::CAST_NONE, count);
    }
  }

  // The partners of columns that move in pairs, for a 2-byte x: one Gather of the x tile's 32-bit
  // words (the host's word offsets fill the first half of the offsets' UB; the gathered words go to
  // its second half), then cast to fp32 into pF.
  __aicore__ inline void GatherWords(const AscendC::LocalTensor<T>& xIn, const AscendC::LocalTensor<float>& pF,
                                     uint32_t count) {
    if constexpr (sizeof(T) == 2) {
      const uint32_t tileWords = t_.chunkRows * t_.dPad / 2;
      AscendC::LocalTensor<uint32_t> got = consts_[tileWords];
      AscendC::Gather(got, xIn.template ReinterpretCast<uint32_t>(), consts_, 0u, count / 2);
      AscendC::Cast(pF, got.template ReinterpretCast<T>(), AscendC::RoundMode::CAST_NONE, count);
    }
  }

  __aicore__ inline void CopyOut(uint64_t xOff, uint32_t n) {
    StoreOutRows(outGm_, outQ_, xOff, n, static_cast<uint32_t>(t_.d), xGapBlocks_, t_.inner);
  }

  RopePermTiling t_;
  uint32_t xGapBlocks_ = 0, tGapBlocks_ = 0;
  AscendC::GlobalTensor<T> xGm_, outGm_;
  AscendC::GlobalTensor<TT> sinGm_, cosGm_;
  AscendC::GlobalTensor<uint32_t> constGm_;
  AscendC::TQue<AscendC::TPosition::VECIN, 1> inX_, inCos_, inSin_, constQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 1> outQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> xF_, pF_, cosF_, sinF_;
  AscendC::LocalTensor<uint32_t> consts_;
  uint32_t runCount_ = 0, runDst_[kMaxPermRuns] = {}, runSrc_[kMaxPermRuns] = {}, runLen_[kMaxPermRuns] = {};
};

// The body every perm entry point shares.
template <typename T, typename TT>
__aicore__ inline void RopeMatrixPermKernel(GM_ADDR x, GM_ADDR sin, GM_ADDR cos, GM_ADDR out, GM_ADDR tiling) {
  RopePermTiling t;
  CopyTiling(&t, tiling);
  AscendC::TPipe pipe;
  RopeMatrixPerm<T, TT> op;
  op.Init(x, sin, cos, out, tiling, t, &pipe);
  op.Process();
}

}  // namespace rope_matrix
