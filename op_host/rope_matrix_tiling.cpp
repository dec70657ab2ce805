// Host tiling for rope_matrix. See inc/rope_matrix_tiling.h for the work split it encodes.
#include "op_host/rope_matrix_tiling.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "tiling/platform/platform_ascendc.h"
#include "tiling/tiling_api.h"  // CANN's matmul tiling, or the twin's equivalent without CANN

namespace rope_matrix {

namespace {
template <typename... A>
[[noreturn]] void fail(const A&... a) {
  std::ostringstream os;
  os << "rope_matrix tiling: ";
  (os << ... << a);
  throw TilingError(os.str());
}
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
}  // namespace

Platform platform_for_soc(const std::string& soc) {
  // UB: 192 KiB minus the 256-byte framework reserve, as GetCoreMemSize(UB) reports it on 910B.
  const uint64_t ub = 196608 - 256;
  if (soc == "Ascend910B1" || soc == "Ascend910B2") return {24, 48, ub};
  if (soc == "Ascend910B3" || soc == "Ascend910B4") return {20, 40, ub};
  fail("unknown SoC '", soc, "'; known: Ascend910B1, Ascend910B2, Ascend910B3, Ascend910B4");
}

uint32_t ub_bytes_per_element(uint32_t xBytes, uint32_t tableBytes) {
  const uint32_t queues = 2 * xBytes /*x*/ + 2 * xBytes /*x@y*/ + 2 * xBytes /*out*/ + 2 * 2 * tableBytes /*cos, sin*/;
  const uint32_t temps = 4 /*x fp32*/ + 4 /*x@y fp32*/ + (tableBytes == 4 ? 0 : 8) /*cos, sin fp32*/;
  return queues + temps;
}

CoreSplit split_cores(uint64_t cores, uint64_t s, uint64_t outer, uint64_t maxSCores) {
  CoreSplit best{1, 1};
  uint64_t bestCost = UINT64_MAX;
  for (uint64_t sc = std::max<uint64_t>(1, std::min(maxSCores, cores)); sc >= 1; --sc) {
    const uint64_t og = std::min<uint64_t>(outer, cores / sc);
    const uint64_t rows = ceil_div(s, sc), heads = ceil_div(outer, og);
    const uint64_t cost = rows * (heads + 1);
    if (cost < bestCost) {  // strictly: a tie keeps the larger sc found first
      bestCost = cost;
      best = {sc, og};
    }
  }
  return best;
}

RopeMatrixTiling compute_tiling(const Problem& p, const Platform& plat, uint32_t maxBlockDim, uint64_t slotBytes) {
  const uint32_t xb = p.xType == DType::FP32 ? 4 : 2;
  if (p.xBytes != xb) fail("xBytes = ", p.xBytes, " does not match the x dtype (", xb, " bytes)");
  if (p.tableBytes != xb && p.tableBytes != 4) fail("table element size ", p.tableBytes, " must be ", xb, " (x's) or 4 (float)");
  if (p.d < kMinD) fail("D = ", p.d, " is below the minimum ", kMinD);
  if (p.s == 0 || p.outer == 0 || p.inner == 0) {
    fail("empty problem (outer = ", p.outer, ", S = ", p.s, ", inner = ", p.inner, "): the launcher must not launch it");
  }
  if (plat.aicNum == 0 || plat.aivNum != 2 * plat.aicNum) {
    fail("platform with ", plat.aicNum, " cube and ", plat.aivNum, " vector cores: the kernel needs 2 vector cores per cube core");
  }
  if (plat.ubBytes <= kAscReservedUb) fail("UB of ", plat.ubBytes, " bytes is smaller than the reserve ", kAscReservedUb);

  RopeMatrixTiling t;
  std::memset(&t, 0, sizeof(t));
  t.d = static_cast<uint32_t>(p.d);
  t.xBytes = p.xBytes;
  t.tableBytes = p.tableBytes;
  const uint32_t align = 32 / std::min(p.xBytes, p.tableBytes);  // 16 elements for 2-byte types, 8 for fp32
  t.dPad = static_cast<uint32_t>(ceil_div(p.d, align) * align);
  t.ubBudget = static_cast<uint32_t>(plat.ubBytes - kAscReservedUb);
  const uint64_t perRow = static_cast<uint64_t>(ub_bytes_per_element(p.xBytes, p.tableBytes)) * t.dPad;
  const uint64_t maxChunk = t.ubBudget / perRow;
  if (maxChunk == 0) {
    fail("D = ", p.d, " (row pitch ", t.dPad, ") needs ", perRow, " UB bytes per row, more than the UB budget of ",
         t.ubBudget, " bytes; the largest D served with these dtypes is ",
         t.ubBudget / ub_bytes_per_element(p.xBytes, p.tableBytes) / align * align);
  }
  if (p.d * p.xBytes > 2097151ull) fail("row of ", p.d * p.xBytes, " bytes exceeds DataCopyPad's 2097151-byte block");
  const uint64_t gap = (p.inner - 1) * p.d * p.xBytes;
  if (gap > UINT32_MAX) fail("x row gap of ", gap, " bytes (inner = ", p.inner, ") exceeds DataCopyPad's 32-bit stride");

  // Cube cores along S (every one gets >= 1 row, 2 when S allows) and along the outer heads, as
  // split_cores balances them (a decode step, S = 1, takes one S-core and splits the heads).
  const uint64_t cores = maxBlockDim ? std::min<uint64_t>(plat.aicNum, maxBlockDim) : plat.aicNum;
  const CoreSplit split = split_cores(cores, p.s, p.outer, ceil_div(p.s, 2));
  const uint64_t sCores = split.sCores, oGroups = split.oGroups;
  t.sCores = static_cast<uint32_t>(sCores);
  t.oGroups = static_cast<uint32_t>(oGroups);
  t.blockDim = static_cast<uint32_t>(sCores * oGroups);
  t.outer = p.outer;
  t.s = p.s;
  t.inner = p.inner;
  t.sBase = p.s / sCores;
  t.sRem = p.s % sCores;
  t.oBase = p.outer / oGroups;
  t.oRem = p.outer % oGroups;
  const uint64_t cubeMax = t.sBase + (t.sRem ? 1 : 0);
  const uint64_t headsMax = t.oBase + (t.oRem ? 1 : 0);  // outer heads of the fullest cube core
  uint64_t chunk = std::min<uint64_t>({maxChunk, ceil_div(cubeMax, 2), kMaxBlockCount});
  // Workspace bound: one step (2 * chunk S rows of a head group) must fit a slot of kSlotBytes.
  // First the rows of a chunk shrink (wide BSND rows of many inner heads), then, at one row per
  // vector core, the inner heads per step; the outer heads per step fill what is left.
  if (slotBytes == 0 || slotBytes > kSlotBytes || slotBytes < 2 * p.d * p.xBytes) {
    fail("slot of ", slotBytes, " bytes: must hold two rows (", 2 * p.d * p.xBytes, " bytes) and at most ", kSlotBytes);
  }
  const uint64_t slotMax = slotBytes / p.xBytes;  // elements
  uint64_t innerChunk = p.inner;
  if (2 * chunk * p.inner * p.d > slotMax) {
    chunk = std::max<uint64_t>(1, slotMax / (2 * p.inner * p.d));
    if (2 * chunk * p.inner * p.d > slotMax) innerChunk = slotMax / (2 * p.d);  // >= 1: 2 * D * 4 bytes << 1 MiB
  }
  // Rows per step: a synchronous IterateAll costs the Matmul API a fixed overhead and drains the
  // cube's pipes, so a step multiplies at least kMinStepRows rows per head when the slot and the
  // cube core's rows allow (the vector cores walk their half of them in chunks of `chunk` rows); the
  // timing model showed ~24 IterateAlls of 80 rows per step leaving the vector cores idle
  // (docs/kernel.md, "Timing model"). With sliced inner heads a step stays at one row per vector.
  uint64_t perChunk = 1;
  if (innerChunk == p.inner) {
    perChunk = std::min<uint64_t>({ceil_div(kMinStepRows, 2 * chunk), slotMax / (2 * chunk * innerChunk * p.d),
                                   ceil_div(cubeMax, 2 * chunk)});
    perChunk = std::max<uint64_t>(perChunk, 1);
  }
  const uint64_t stepRows = 2 * chunk * perChunk;
  // The outer heads per step fill the slot, in groups of equal size (the last one is not a sliver).
  const uint64_t outerMax = std::min<uint64_t>(headsMax, slotMax / (stepRows * innerChunk * p.d));
  const uint64_t outerChunk = ceil_div(headsMax, ceil_div(headsMax, outerMax));
  t.chunkRows = static_cast<uint32_t>(chunk);
  t.ubBytes = static_cast<uint32_t>(perRow * chunk);
  t.outerChunk = outerChunk;
  t.innerChunk = innerChunk;
  t.stepRows = stepRows;
  t.headStride = stepRows * innerChunk * p.d;
  t.slotElems = outerChunk * t.headStride;
  t.userWorkspace = static_cast<uint64_t>(t.blockDim) * kSlots * t.slotElems * p.xBytes;
  return t;
}

static matmul_tiling::DataType matmul_data_type(DType xType) {
  switch (xType) {
    case DType::FP32: return matmul_tiling::DataType::DT_FLOAT;
    case DType::FP16: return matmul_tiling::DataType::DT_FLOAT16;
    case DType::BF16: break;
  }
  return matmul_tiling::DataType::DT_BFLOAT16;
}

std::vector<uint8_t> compute_matmul_tiling(const RopeMatrixTiling& t, DType xType,
                                           const platform_ascendc::PlatformAscendC& plat) {
  using namespace matmul_tiling;
  const DataType dt = matmul_data_type(xType);
  if ((xType == DType::FP32) != (t.xBytes == 4)) fail("x dtype and xBytes = ", t.xBytes, " of the tiling disagree");
  const int64_t m = static_cast<int64_t>(t.stepRows * t.innerChunk);  // <= kSlotBytes / 2 elements
  const int32_t M = static_cast<int32_t>(m), D = static_cast<int32_t>(t.d);
  MultiCoreMatmulTiling api(plat);
  api.SetDim(static_cast<int32_t>(t.blockDim));
  api.SetAType(TPosition::GM, CubeFormat::ND, dt, false);
  api.SetBType(TPosition::GM, CubeFormat::ND, dt, false);
  api.SetCType(TPosition::GM, CubeFormat::ND, dt);
  api.SetBias(false);
  api.SetOrgShape(M, D, D);
  api.SetShape(M, D, D);
  api.SetSingleShape(M, D, D);
  api.SetBufferSpace(-1, -1, -1);
  optiling::TCubeTiling cube;
  if (api.GetTiling(cube) == -1) {
    fail("matmul tiling failed for [", M, ", ", D, "] @ [", D, ", ", D, "] (", t.xBytes, "-byte elements)");
  }
  // Keep y in L1 for the whole IterateAll, as the original operator kept its rotate matrix resident
  // (seed 002). With one K block (baseK >= D) and depthB1 = 2, the Matmul API's NORMAL cube-in buffer
  // double-buffers B over the M blocks and caches nothing, so y would be read from GM again for every
  // baseM rows; with depthB1 = 1 it caches that one block ("k full load") and reads y once per
  // IterateAll (asc-devkit impl/adv_api/detail/matmul/resource/cube_in_buffer/cube_in_buffer_normal.h).
  if (cube.get_baseK() >= D && cube.get_baseN() >= D && cube.get_depthB1() == 2) cube.set_depthB1(1);
  std::vector<uint8_t> bytes(cube.GetDataSize());
  cube.SaveToBuffer(bytes.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> pack_tiling(const RopeMatrixTiling& t, const std::vector<uint8_t>& cube) {
  std::vector<uint8_t> out(sizeof(RopeMatrixTiling) + cube.size());
  std::memcpy(out.data(), &t, sizeof(t));
  std::memcpy(out.data() + sizeof(t), cube.data(), cube.size());
  return out;
}

}  // namespace rope_matrix
