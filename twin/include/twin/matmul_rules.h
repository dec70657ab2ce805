// The twin's rules on the Matmul API (adv_api/matmul/matmul_intf.h calls them): the kernel-side
// TCubeTiling (`matmul-tiling`), SetTail (`matmul-tail`), the core it runs on (`matmul-on-vector`)
// and the call order (`matmul-order`).
#pragma once

#include <cstdint>
#include <string>

#include "kernel_tiling/kernel_tiling.h"
#include "twin/core.h"

namespace twin {

// The tiling the Matmul is initialised with, for A/B elements of `sz` bytes: multiples of 16, the
// L0A/L0B (64 KiB), L0C (128 KiB) and L1 (512 KiB minus 256 B) capacities of A2, usedCoreNum at
// most the SoC's cube cores.
inline void check_cube_tiling(const TCubeTiling& t, int64_t sz) {
  auto bad = [&](const std::string& why) { fail("matmul-tiling", "TCubeTiling invalid: " + why); };
  if (t.singleCoreM <= 0 || t.singleCoreN <= 0 || t.singleCoreK <= 0) {
    bad(str("singleCoreM/N/K = ", t.singleCoreM, "/", t.singleCoreN, "/", t.singleCoreK, " must be > 0"));
  }
  if (t.M <= 0 || t.N <= 0 || t.Ka <= 0 || t.Kb != t.Ka) bad(str("M/N/Ka/Kb = ", t.M, "/", t.N, "/", t.Ka, "/", t.Kb));
  if (t.baseM <= 0 || t.baseN <= 0 || t.baseK <= 0 || t.baseM % 16 || t.baseN % 16 || t.baseK % (32 / sz == 16 ? 16 : 8)) {
    bad(str("baseM/N/K = ", t.baseM, "/", t.baseN, "/", t.baseK, " must be multiples of 16 (baseK of 32/sizeof)"));
  }
  const int dbA = t.dbL0A, dbB = t.dbL0B, dbC = t.dbL0C;
  if (dbA < 1 || dbA > 2 || dbB < 1 || dbB > 2 || dbC < 1 || dbC > 2) bad("dbL0A/B/C must be 1 or 2");
  const int64_t l0a = int64_t(t.baseM) * t.baseK * sz * dbA, l0b = int64_t(t.baseN) * t.baseK * sz * dbB;
  const int64_t l0c = int64_t(t.baseM) * t.baseN * 4 * dbC;
  if (l0a > 64 * 1024) bad(str("L0A: baseM*baseK*sizeof*dbL0A = ", l0a, " > 65536"));
  if (l0b > 64 * 1024) bad(str("L0B: baseN*baseK*sizeof*dbL0B = ", l0b, " > 65536"));
  if (l0c > 128 * 1024) bad(str("L0C: baseM*baseN*4*dbL0C = ", l0c, " > 131072"));
  const int64_t l1 = int64_t(t.depthA1) * t.baseM * t.baseK * sz + int64_t(t.depthB1) * t.baseN * t.baseK * sz;
  if (l1 > 512 * 1024 - 256) bad(str("L1: A and B tiles need ", l1, " bytes > 524032"));
  if (t.iterateOrder != 0 && t.iterateOrder != 1) bad("iterateOrder must be 0 or 1");
  if (t.isBias != 0) bad("isBias: bias is not used by this kernel");
  // TCubeTiling结构体.md: usedCoreNum at most the core count; in cube-only mode SetDim takes the AIC
  // count (SetDim.md), so the SoC's cube cores bound it.
  if (t.usedCoreNum > launch().max_aic()) {
    bad(str("usedCoreNum = ", t.usedCoreNum, " above the SoC's ", launch().max_aic(), " cube cores"));
  }
  if (t.usedCoreNum <= 0 || t.usedCoreNum > launch().block_dim() * 2) bad(str("usedCoreNum = ", t.usedCoreNum));
}

// SetTail: -1 keeps the current value; unlike CANN's own check the twin rejects 0 and anything above
// the tiling's single-core size. Returns true when `v` overrides.
inline bool check_tail(int v, int limit, const char* name) {
  if (v == -1) return false;
  if (v <= 0 || v > limit) fail("matmul-tail", str("SetTail ", name, " = ", v, " outside [1, ", limit, "] (tiling single-core size)"));
  return true;
}

// Every Matmul call runs on the cube core (cube-only mode) and, but Init, after Init.
inline void check_matmul_call(const char* api, bool inited) {
  tick();
  if (core().type != CoreType::AIC) {
    fail("matmul-on-vector", str(api, " on a vector core: in cube-only mode the Matmul runs on the AIC"));
  }
  if (!inited && std::string(api) != "Matmul::Init") fail("matmul-order", str(api, " before REGIST_MATMUL_OBJ/Init"));
}

}  // namespace twin
