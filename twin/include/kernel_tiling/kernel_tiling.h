// The kernel-side matmul tiling struct, field for field in the order Ascend C documents for
// TCubeTiling (all int32_t). The host writes it with optiling::TCubeTiling::SaveToBuffer.
#pragma once

#include <cstdint>

struct TCubeTiling {
  int32_t usedCoreNum, M, N, Ka, Kb, singleCoreM, singleCoreN, singleCoreK, baseM, baseN, baseK,
      depthA1, depthB1, stepM, stepN, isBias, transLength, iterateOrder, shareMode, shareL1Size,
      shareL0CSize, shareUbSize, batchM, batchN, singleBatchM, singleBatchN, stepKa, stepKb,
      depthAL1CacheUB, depthBL1CacheUB, dbL0A, dbL0B, dbL0C, ALayoutInfoB, ALayoutInfoS,
      ALayoutInfoN, ALayoutInfoG, ALayoutInfoD, BLayoutInfoB, BLayoutInfoS, BLayoutInfoN,
      BLayoutInfoG, BLayoutInfoD, CLayoutInfoB, CLayoutInfoS1, CLayoutInfoN, CLayoutInfoG,
      CLayoutInfoS2, BatchNum, mxTypePara;
};
