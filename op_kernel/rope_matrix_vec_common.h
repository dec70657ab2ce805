// Pieces the two kernels share: the tiling copy from GM, and the vector side's cos/sin row load and
// out row store (both kernels keep x as [outer, S, inner, D] and the tables as [S, D] rows, dPad
// apart in UB).
//
// Include after kernel_operator.h (the MIX kernel defines ASCENDC_CUBE_ONLY before its includes).
#pragma once

#include "kernel_operator.h"

namespace rope_matrix {

// Copies a tiling struct from GM byte by byte: a byte pointer may alias any object, so the struct's
// fields of any width are written without a strict-aliasing violation.
template <typename S>
__aicore__ inline void CopyTiling(S* dst, GM_ADDR src) {
  AscendC::GlobalTensor<uint8_t> g;
  g.SetGlobalBuffer((__gm__ uint8_t*)src, sizeof(S));
  uint8_t* d = reinterpret_cast<uint8_t*>(dst);
  for (uint32_t i = 0; i < sizeof(S); ++i) {
    d[i] = g.GetValue(i);
  }
}

// 32-byte blocks of UB left after a row of d elements of type E (DataCopyPad fills whole blocks)
// so that rows sit dPad elements apart: the gap a row copy between GM and UB skips.
template <typename E>
__aicore__ inline uint32_t RowGapBlocks(uint32_t dPad, uint32_t d) {
  return (dPad * sizeof(E) - (d * sizeof(E) + 31) / 32 * 32) / 32;
}

// cos/sin rows [sRow, sRow + n) of width d into UB, dPad apart (gapBlocks 32-byte blocks between
// rows), and their fp32 views: the rows themselves for fp32 tables, else one Cast each into the
// VECCALC buffers cosBuf/sinBuf.
template <typename TT, typename InQue, typename CalcBuf>
__aicore__ inline void LoadTableRows(AscendC::GlobalTensor<TT>& cosGm, AscendC::GlobalTensor<TT>& sinGm,
                                     uint64_t sRow, uint32_t n, uint32_t d, uint32_t dPad, uint32_t gapBlocks,
                                     InQue& inCos, InQue& inSin, CalcBuf& cosBuf, CalcBuf& sinBuf,
                                     AscendC::LocalTensor<TT>& cosT, AscendC::LocalTensor<TT>& sinT,
                                     AscendC::LocalTensor<float>& cosF, AscendC::LocalTensor<float>& sinF) {
  const uint32_t count = n * dPad;
  AscendC::DataCopyExtParams tabCopy{static_cast<uint16_t>(n), static_cast<uint32_t>(d * sizeof(TT)), 0,
                                     gapBlocks, 0};
  AscendC::DataCopyPadExtParams<TT> tabPad{false, 0, 0, TT{}};
  AscendC::LocalTensor<TT> cosIn = inCos.template AllocTensor<TT>();
  AscendC::DataCopyPad(cosIn, cosGm[sRow * d], tabCopy, tabPad);
  inCos.EnQue(cosIn);
  AscendC::LocalTensor<TT> sinIn = inSin.template AllocTensor<TT>();
  AscendC::DataCopyPad(sinIn, sinGm[sRow * d], tabCopy, tabPad);
  inSin.EnQue(sinIn);
  cosT = inCos.template DeQue<TT>();
  sinT = inSin.template DeQue<TT>();
  if constexpr (AscendC::IsSameType<TT, float>::value) {
    cosF = cosT;
    sinF = sinT;
  } else {
    cosF = cosBuf.template Get<float>();
    sinF = sinBuf.template Get<float>();
    AscendC::Cast(cosF, cosT, AscendC::RoundMode::CAST_NONE, count);
    AscendC::Cast(sinF, sinT, AscendC::RoundMode::CAST_NONE, count);
  }
}

// n out rows of width d from the VECOUT queue to GM at xOff: UB rows gapBlocks 32-byte blocks apart,
// GM rows inner * d elements apart (the other inner heads lie between them).
template <typename T, typename OutQue>
__aicore__ inline void StoreOutRows(AscendC::GlobalTensor<T>& outGm, OutQue& outQ, uint64_t xOff, uint32_t n,
                                    uint32_t d, uint32_t gapBlocks, uint64_t inner) {
  AscendC::LocalTensor<T> outT = outQ.template DeQue<T>();
  AscendC::DataCopyExtParams p{static_cast<uint16_t>(n), static_cast<uint32_t>(d * sizeof(T)), gapBlocks,
                               static_cast<uint32_t>((inner - 1) * d * sizeof(T)), 0};
  AscendC::DataCopyPad(outGm[xOff], outT, p);
  outQ.FreeTensor(outT);
}

}  // namespace rope_matrix
