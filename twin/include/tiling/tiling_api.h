// The twin's host matmul tiling: the subset of CANN's matmul_tiling::MultiCoreMatmulTiling and
// optiling::TCubeTiling that op_host/ uses, so op_host compiles unchanged with and without CANN.
// The policy (base block sizes, L1 steps) is our own simple one; it satisfies every TCubeTiling
// rule the twin's Matmul checks (multiples of 16, L0A/L0B/L0C/L1 capacity).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernel_tiling/kernel_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {

class TCubeTiling {
 public:
#define TWIN_TCT_FIELD(f) \
  void set_##f(int32_t v) { d_.f = v; } \
  int32_t get_##f() const { return d_.f; }
  TWIN_TCT_FIELD(usedCoreNum) TWIN_TCT_FIELD(M) TWIN_TCT_FIELD(N) TWIN_TCT_FIELD(Ka) TWIN_TCT_FIELD(Kb)
  TWIN_TCT_FIELD(singleCoreM) TWIN_TCT_FIELD(singleCoreN) TWIN_TCT_FIELD(singleCoreK)
  TWIN_TCT_FIELD(baseM) TWIN_TCT_FIELD(baseN) TWIN_TCT_FIELD(baseK) TWIN_TCT_FIELD(depthA1)
  TWIN_TCT_FIELD(depthB1) TWIN_TCT_FIELD(stepM) TWIN_TCT_FIELD(stepN) TWIN_TCT_FIELD(isBias)
  TWIN_TCT_FIELD(iterateOrder) TWIN_TCT_FIELD(stepKa) TWIN_TCT_FIELD(stepKb) TWIN_TCT_FIELD(dbL0A)
  TWIN_TCT_FIELD(dbL0B) TWIN_TCT_FIELD(dbL0C) TWIN_TCT_FIELD(shareL1Size) TWIN_TCT_FIELD(shareL0CSize)
  TWIN_TCT_FIELD(shareUbSize) TWIN_TCT_FIELD(BatchNum)
#undef TWIN_TCT_FIELD
  size_t GetDataSize() const { return sizeof(::TCubeTiling); }
  void SaveToBuffer(void* buf, size_t cap) const { std::memcpy(buf, &d_, std::min(cap, sizeof(d_))); }
  ::TCubeTiling& raw() { return d_; }

 private:
  ::TCubeTiling d_{};
};

}  // namespace optiling

namespace matmul_tiling {

enum class TPosition { GM, VECIN, VECOUT, VECCALC, TSCM, A1, B1, C1, CO1, CO2 };
enum class CubeFormat { ND, NZ, ND_ALIGN, VECTOR, SCALAR };
enum class DataType { DT_FLOAT, DT_FLOAT16, DT_BFLOAT16, DT_INT8, DT_INT32 };

// twin only: the A type the host code last passed to SetAType on this thread, so tests can check
// that the host tiles each x dtype as its own type.
inline DataType& twin_last_a_type() {
  static thread_local DataType t = DataType::DT_INT8;
  return t;
}
inline const char* twin_data_type_name(DataType t) {
  switch (t) {
    case DataType::DT_FLOAT: return "DT_FLOAT";
    case DataType::DT_FLOAT16: return "DT_FLOAT16";
    case DataType::DT_BFLOAT16: return "DT_BFLOAT16";
    case DataType::DT_INT8: return "DT_INT8";
    case DataType::DT_INT32: return "DT_INT32";
  }
  return "?";
}

// The rules below are those of CANN's host tiling (asc-devkit impl/adv_api/tiling/matmul:
// matmul_tiling_base.cpp, bmm_tiling.cpp, matmul_tiling_algorithm.cpp; docs/zh/api/SIMD-API/高阶API/
// 矩阵计算/Matmul-Tiling类: SetFixSplit.md, SetBufferSpace.md, SetShape.md, GetTiling.md), each
// returning -1 where CANN returns -1; docs/kernel.md ("Matmul tiling rules") lists them.
class MultiCoreMatmulTiling {
 public:
  // Constructed with the platform, as CANN's samples do: the L1/L0/UB capacities come from it. The
  // platform-less constructor CANN also declares is deleted here (it needs a SoC set elsewhere).
  MultiCoreMatmulTiling() = delete;
  explicit MultiCoreMatmulTiling(const platform_ascendc::PlatformAscendC& plat) {
    uint64_t v = 0;
    plat.GetCoreMemSize(platform_ascendc::CoreMemType::L1, v);
    l1_ = l1Max_ = static_cast<int64_t>(v) - 256;
    plat.GetCoreMemSize(platform_ascendc::CoreMemType::L0_C, v);
    l0c_ = l0cMax_ = static_cast<int64_t>(v);
    plat.GetCoreMemSize(platform_ascendc::CoreMemType::L0_A, v);
    l0a_ = static_cast<int64_t>(v);
    plat.GetCoreMemSize(platform_ascendc::CoreMemType::L0_B, v);
    l0b_ = static_cast<int64_t>(v);
    plat.GetCoreMemSize(platform_ascendc::CoreMemType::UB, v);
    ubMax_ = static_cast<int64_t>(v);
  }
  // CANN stores any value and returns 0 (bmm_tiling.cpp); a dim <= 0 fails in GetTiling here.
  int32_t SetDim(int32_t dim) { dim_ = dim; return 0; }
  int32_t SetAType(TPosition, CubeFormat f, DataType t, bool trans = false) {
    a_ = t; fa_ = f; ta_ = trans;
    twin_last_a_type() = t;
    return 0;
  }
  int32_t SetBType(TPosition, CubeFormat f, DataType t, bool trans = false) { b_ = t; fb_ = f; tb_ = trans; return 0; }
  int32_t SetCType(TPosition, CubeFormat f, DataType t) { c_ = t; fc_ = f; return 0; }
  int32_t SetBiasType(TPosition, CubeFormat, DataType) { return 0; }
  int32_t SetBias(bool b) { bias_ = b; return 0; }
  // As CANN: the shape is stored (-1 keeps the original shape's value); the original shape defaults
  // to it when SetOrgShape was not called. Both always return 0; a 0 fails in GetTiling.
  int32_t SetShape(int32_t m, int32_t n, int32_t k) {
    m_ = m; n_ = n; k_ = k;
    if (om_ == -1 && on_ == -1 && ok_ == -1) {
      om_ = m; on_ = n; ok_ = k;
    }
    return 0;
  }
  int32_t SetOrgShape(int32_t m, int32_t n, int32_t k) { om_ = m; on_ = n; ok_ = k; return 0; }
  // Values <= 0 are ignored (CANN keeps the previous single-core size).
  int32_t SetSingleShape(int32_t m = -1, int32_t n = -1, int32_t k = -1) {
    if (m > 0) sm_ = m;
    if (n > 0) sn_ = n;
    if (k > 0) sk_ = k;
    return 0;
  }
  // -1 when any value is 0, baseM or baseN is not a multiple of 16, or baseK not a multiple of
  // k0 = 32 bytes / sizeof(A) (SetAType first), as CANN; and, stricter than CANN's code, for any
  // baseK but -1: SetFixSplit.md says only -1 is supported.
  int32_t SetFixSplit(int32_t bm = -1, int32_t bn = -1, int32_t bk = -1) {
    if (bm == 0 || bn == 0 || bk == 0) return -1;
    if (bm != -1 && bm % 16 != 0) return -1;
    if (bn != -1 && bn % 16 != 0) return -1;
    if (bk != -1 && bk % (32 / elem_bytes()) != 0) return -1;
    if (bk != -1) return -1;
    if (bm != -1) fbm_ = bm;
    if (bn != -1) fbn_ = bn;
    return 0;
  }
  // -1 when a size is below -1 or above what the platform has; sizes are rounded down to 32 bytes.
  int32_t SetBufferSpace(int32_t l1 = -1, int32_t l0c = -1, int32_t ub = -1, int32_t bt = -1) {
    if (l1 < -1 || l1 > l1Max_ || l0c < -1 || l0c > l0cMax_ || ub < -1 || ub > ubMax_ || bt < -1 || bt > kBtBytes) return -1;
    if (l1 != -1) l1_ = l1 - l1 % 32;
    if (l0c != -1) l0c_ = l0c - l0c % 32;
    return 0;
  }

  // 0 on success, -1 when the problem cannot be tiled (as CANN's GetTiling).
  int64_t GetTiling(optiling::TCubeTiling& out) {
    // Outside what the twin models (not CANN rules): mixed or transposed A/B, formats other than ND.
    if (a_ != b_ || ta_ || tb_ || fa_ != CubeFormat::ND || fb_ != CubeFormat::ND || fc_ != CubeFormat::ND) return -1;
    const int32_t M = om_ > 0 ? om_ : m_, N = on_ > 0 ? on_ : n_, K = ok_ > 0 ? ok_ : k_;
    const int32_t sm = sm_ > 0 ? sm_ : (m_ > 0 ? m_ : M), sn = sn_ > 0 ? sn_ : (n_ > 0 ? n_ : N),
                  sk = sk_ > 0 ? sk_ : (k_ > 0 ? k_ : K);
    const int64_t sz = elem_bytes();
    // CANN CheckSetParam: a zero single shape; a fixed base block over L0C (over L0A or L0B needs a
    // fixed baseK, which SetFixSplit refuses here).
    if (m_ == 0 || n_ == 0 || k_ == 0) return -1;
    if (fbm_ > 0 && fbn_ > 0 && int64_t(fbm_) * fbn_ * 4 > l0c_) return -1;
    // CANN CheckBaseMN: one 32-byte column of baseM (baseN) rows must fit L0A (L0B), 16 columns L0C.
    if (fbm_ > 0 && (int64_t(fbm_) * 32 > l0a_ || int64_t(fbm_) * (fbn_ > 0 ? fbn_ : 16) * 4 > l0c_)) return -1;
    if (fbn_ > 0 && (int64_t(fbn_) * 32 > l0b_ || int64_t(fbn_) * (fbm_ > 0 ? fbm_ : 16) * 4 > l0c_)) return -1;
    if (dim_ <= 0 || M <= 0 || N <= 0 || K <= 0 || sm <= 0 || sn <= 0 || sk <= 0) return -1;
    auto a16 = [](int64_t v) { return (v + 15) / 16 * 16; };
    // SetFixSplit.md: baseM at most singleM rounded up to 16, baseN at most singleN rounded up to C0.
    if (fbm_ > 0 && fbm_ > a16(sm)) return -1;
    if (fbn_ > 0 && fbn_ > (sn + 32 / sz - 1) / (32 / sz) * (32 / sz)) return -1;
    int64_t bm = fbm_ > 0 ? fbm_ : std::min<int64_t>(a16(sm), 128);
    int64_t bn = fbn_ > 0 ? fbn_ : std::min<int64_t>(a16(sn), 128);
    if (bm * bn * 4 > l0c_) return -1;
    const int64_t dbl0 = 2;
    int64_t bk = a16(sk);
    while (bk > 16 && (bm * bk * sz * dbl0 > l0a_ || bn * bk * sz * dbl0 > l0b_)) bk -= 16;
    if (bm * bk * sz * dbl0 > l0a_ || bn * bk * sz * dbl0 > l0b_) return -1;
    int64_t stepK = (sk + bk - 1) / bk;
    auto l1_need = [&](int64_t s) { return 2 * s * bm * bk * sz + 2 * s * bn * bk * sz; };
    while (stepK > 1 && l1_need(stepK) > l1_) --stepK;
    if (l1_need(stepK) > l1_) return -1;
    const int32_t dbl0c = bm * bn * 4 * 2 <= l0c_ ? 2 : 1;
    out = optiling::TCubeTiling();
    out.set_usedCoreNum(dim_);
    out.set_M(M); out.set_N(N); out.set_Ka(K); out.set_Kb(K);
    out.set_singleCoreM(sm); out.set_singleCoreN(sn); out.set_singleCoreK(sk);
    out.set_baseM(static_cast<int32_t>(bm)); out.set_baseN(static_cast<int32_t>(bn)); out.set_baseK(static_cast<int32_t>(bk));
    out.set_stepM(1); out.set_stepN(1);
    out.set_stepKa(static_cast<int32_t>(stepK)); out.set_stepKb(static_cast<int32_t>(stepK));
    out.set_depthA1(static_cast<int32_t>(2 * stepK)); out.set_depthB1(static_cast<int32_t>(2 * stepK));
    out.set_isBias(bias_ ? 1 : 0);
    out.set_iterateOrder(0);
    out.set_dbL0A(2); out.set_dbL0B(2); out.set_dbL0C(dbl0c);
    out.set_shareL1Size(static_cast<int32_t>(l1_need(stepK)));
    out.set_shareL0CSize(static_cast<int32_t>(bm * bn * 4 * dbl0c));
    out.set_BatchNum(1);
    return 0;
  }

 private:
  static constexpr int64_t kBtBytes = 1024;  // A2 BiasTable
  int64_t elem_bytes() const { return a_ == DataType::DT_FLOAT || a_ == DataType::DT_INT32 ? 4 : a_ == DataType::DT_INT8 ? 1 : 2; }
  int64_t l1_ = 0, l0c_ = 0, l0a_ = 0, l0b_ = 0, l1Max_ = 0, l0cMax_ = 0, ubMax_ = 0;
  int32_t dim_ = 0, m_ = -1, n_ = -1, k_ = -1, om_ = -1, on_ = -1, ok_ = -1, sm_ = -1, sn_ = -1, sk_ = -1;
  int32_t fbm_ = -1, fbn_ = -1;
  bool bias_ = false, ta_ = false, tb_ = false;
  DataType a_ = DataType::DT_FLOAT16, b_ = DataType::DT_FLOAT16, c_ = DataType::DT_FLOAT16;
  CubeFormat fa_ = CubeFormat::ND, fb_ = CubeFormat::ND, fc_ = CubeFormat::ND;
};

}  // namespace matmul_tiling
