// The twin's Matmul high-level API (cube-only mode: ASCENDC_CUBE_ONLY, the Matmul runs on the AIC).
// C = A @ B over one single-core block, fp32 accumulation, C rounded to its type with round to
// nearest even; ND row-major with row stride Ka (A), N (B) and N (C) from the tiling.
#pragma once

#ifndef ASCENDC_CUBE_ONLY
#error "twin: only the cube-only Matmul (define ASCENDC_CUBE_ONLY before every Ascend C include) is modelled"
#endif
#if defined(TWIN_KERNEL_OPERATOR_INCLUDED) && !defined(TWIN_CUBE_ONLY_BEFORE_KERNEL_OPERATOR)
#error "ASCENDC_CUBE_ONLY was defined after kernel_operator.h: define it before every Ascend C include"
#endif

#include <vector>

#include "kernel_operator.h"
#include "kernel_tiling/kernel_tiling.h"

enum class CubeFormat { ND, NZ, ND_ALIGN, VECTOR, SCALAR };
enum class LayoutMode { NONE, BSNGD, SBNGD, BNGS1S2, NORMAL };

struct MatmulConfig {
  int kind = 0;
};
constexpr MatmulConfig CFG_NORM{0};
constexpr MatmulConfig CFG_MDL{1};

// The Matmul API lives in namespace `matmul` only: CANN 8.0 declares it there, newer versions alias
// `matmul` to AscendC. `AscendC::Matmul` (newer versions only) does not compile here.
namespace matmul {
template <AscendC::TPosition POSITION, CubeFormat FORMAT, typename TYPE, bool ISTRANS = false,
          LayoutMode LAYOUT = LayoutMode::NONE, bool IBSHARE = false>
struct MatmulType {
  static constexpr AscendC::TPosition pos = POSITION;
  static constexpr CubeFormat format = FORMAT;
  using T = TYPE;
  static constexpr bool isTrans = ISTRANS;
  static constexpr bool ibShare = IBSHARE;
};

template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE, const auto& MM_CFG = CFG_NORM>
class Matmul {
  using TA = typename A_TYPE::T;
  using TB = typename B_TYPE::T;
  using TC = typename C_TYPE::T;
  static_assert(std::is_same<TA, TB>::value, "Matmul: A and B must have the same type on A2");
  static_assert((std::is_same<TA, bfloat16_t>::value || std::is_same<TA, half>::value || std::is_same<TA, float>::value),
                "Matmul: A2 supports bf16, half and float inputs (int8 not modelled)");
  static_assert(!std::is_same<TA, float>::value || std::is_same<TC, float>::value, "Matmul: float inputs need a float C");
  static_assert(A_TYPE::pos == AscendC::TPosition::GM && B_TYPE::pos == AscendC::TPosition::GM && C_TYPE::pos == AscendC::TPosition::GM,
                "twin: only GM positions are modelled");
  static_assert(A_TYPE::format == CubeFormat::ND && B_TYPE::format == CubeFormat::ND && C_TYPE::format == CubeFormat::ND,
                "twin: only ND format is modelled");
  using TBias = typename BIAS_TYPE::T;
  // A2's Matmul type table: bias float (or half) with half/bf16 A and B, float with float A and B.
  // The default BIAS_TYPE = C_TYPE is therefore wrong for bf16 C: pass the bias type explicitly.
  static_assert(std::is_same<TBias, float>::value || (std::is_same<TBias, half>::value && !std::is_same<TA, float>::value),
                "Matmul: A2 allows a float bias type (or half, with half/bf16 A and B); pass BIAS_TYPE explicitly");

 public:
  __aicore__ inline void Init(const TCubeTiling* tiling, AscendC::TPipe* = nullptr) {
    on_cube("Matmul::Init");
    const TCubeTiling& t = *tiling;
    auto bad = [&](const std::string& why) { ::twin::fail("matmul-tiling", "TCubeTiling invalid: " + why); };
    const int64_t sz = sizeof(TA);
    if (t.singleCoreM <= 0 || t.singleCoreN <= 0 || t.singleCoreK <= 0) {
      bad(::twin::str("singleCoreM/N/K = ", t.singleCoreM, "/", t.singleCoreN, "/", t.singleCoreK, " must be > 0"));
    }
    if (t.M <= 0 || t.N <= 0 || t.Ka <= 0 || t.Kb != t.Ka) bad(::twin::str("M/N/Ka/Kb = ", t.M, "/", t.N, "/", t.Ka, "/", t.Kb));
    if (t.baseM <= 0 || t.baseN <= 0 || t.baseK <= 0 || t.baseM % 16 || t.baseN % 16 || t.baseK % (32 / sz == 16 ? 16 : 8)) {
      bad(::twin::str("baseM/N/K = ", t.baseM, "/", t.baseN, "/", t.baseK, " must be multiples of 16 (baseK of 32/sizeof)"));
    }
    const int dbA = t.dbL0A, dbB = t.dbL0B, dbC = t.dbL0C;
    if (dbA < 1 || dbA > 2 || dbB < 1 || dbB > 2 || dbC < 1 || dbC > 2) bad("dbL0A/B/C must be 1 or 2");
    if (int64_t(t.baseM) * t.baseK * sz * dbA > 64 * 1024) bad(::twin::str("L0A: baseM*baseK*sizeof*dbL0A = ", int64_t(t.baseM) * t.baseK * sz * dbA, " > 65536"));
    if (int64_t(t.baseN) * t.baseK * sz * dbB > 64 * 1024) bad(::twin::str("L0B: baseN*baseK*sizeof*dbL0B = ", int64_t(t.baseN) * t.baseK * sz * dbB, " > 65536"));
    if (int64_t(t.baseM) * t.baseN * 4 * dbC > 128 * 1024) bad(::twin::str("L0C: baseM*baseN*4*dbL0C = ", int64_t(t.baseM) * t.baseN * 4 * dbC, " > 131072"));
    const int64_t l1 = int64_t(t.depthA1) * t.baseM * t.baseK * sz + int64_t(t.depthB1) * t.baseN * t.baseK * sz;
    if (l1 > 512 * 1024 - 256) bad(::twin::str("L1: A and B tiles need ", l1, " bytes > 524032"));
    if (t.iterateOrder != 0 && t.iterateOrder != 1) bad("iterateOrder must be 0 or 1");
    if (t.isBias != 0) bad("isBias: bias is not used by this kernel");
    if (t.usedCoreNum <= 0 || t.usedCoreNum > ::twin::launch().block_dim() * 2) bad(::twin::str("usedCoreNum = ", t.usedCoreNum));
    tiling_ = t;
    inited_ = true;
    m_ = t.singleCoreM;
    n_ = t.singleCoreN;
    k_ = t.singleCoreK;
  }
  __aicore__ inline void SetTensorA(const AscendC::GlobalTensor<TA>& gm, bool isTransposeA = false) {
    on_cube("Matmul::SetTensorA");
    if (isTransposeA && !A_TYPE::isTrans) ::twin::fail("matmul-trans", "SetTensorA(trans=true) but MatmulType ISTRANS=false");
    a_ = gm;
    has_a_ = true;
  }
  __aicore__ inline void SetTensorB(const AscendC::GlobalTensor<TB>& gm, bool isTransposeB = false) {
    on_cube("Matmul::SetTensorB");
    if (isTransposeB && !B_TYPE::isTrans) ::twin::fail("matmul-trans", "SetTensorB(trans=true) but MatmulType ISTRANS=false");
    b_ = gm;
    has_b_ = true;
    b_loaded_ = false;
  }
  // Sticky overrides of singleCoreM/N/K; -1 keeps the current value. Unlike CANN's own check the
  // twin rejects 0 and anything above the tiling's single-core size.
  __aicore__ inline void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) {
    on_cube("Matmul::SetTail");
    auto chk = [&](int v, int limit, const char* n) {
      if (v == -1) return false;
      if (v <= 0 || v > limit) {
        ::twin::fail("matmul-tail", ::twin::str("SetTail ", n, " = ", v, " outside [1, ", limit, "] (tiling single-core size)"));
      }
      return true;
    };
    if (chk(tailM, tiling_.singleCoreM, "tailM")) m_ = tailM;
    if (chk(tailN, tiling_.singleCoreN, "tailN")) n_ = tailN;
    if (chk(tailK, tiling_.singleCoreK, "tailK")) k_ = tailK;
  }
  template <bool sync = true>
  __aicore__ inline void IterateAll(const AscendC::GlobalTensor<TC>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                                    bool waitIterateAll = false, bool fakeMsg = false) {
    on_cube("Matmul::IterateAll");
    (void)enSequentialWrite; (void)waitIterateAll; (void)fakeMsg;
    if (enAtomic) ::twin::fail("twin-unmodelled", "IterateAll with atomic add is not modelled");
    if (!has_a_ || !has_b_) ::twin::fail("matmul-order", "IterateAll before SetTensorA/SetTensorB");
    const int64_t M = m_, N = n_, K = k_, lda = tiling_.Ka, ldb = tiling_.N, ldc = tiling_.N;
    a_.check(0, (M - 1) * lda + K, false, "Matmul::IterateAll (A)");
    b_.check(0, (K - 1) * ldb + N, false, "Matmul::IterateAll (B)");
    gm.check(0, (M - 1) * ldc + N, true, "Matmul::IterateAll (C)");
    ::twin::timing::matmul_iterate_all(M, N, K, tiling_.baseM, sizeof(TA), sizeof(TC), b_.region());
    if (!b_loaded_) {  // B is counted once per SetTensorB: it stays in L1 across IterateAll calls
      for (int64_t k = 0; k < K; ++k) b_.account(k * ldb * sizeof(TB), N * sizeof(TB), false);
      bf_.assign(K * N, 0.f);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) bf_[k * N + n] = ::twin::to_float(b_.raw()[k * ldb + n]);
      b_loaded_ = true;
    }
    std::vector<float> acc(N), arow(K);
    for (int64_t m = 0; m < M; ++m) {
      a_.account(m * lda * sizeof(TA), K * sizeof(TA), false);
      const TA* ar = a_.raw() + m * lda;
      for (int64_t k = 0; k < K; ++k) arow[k] = ::twin::to_float(ar[k]);
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t k = 0; k < K; ++k) {
        const float a = arow[k];
        const float* br = bf_.data() + k * N;
        for (int64_t n = 0; n < N; ++n) acc[n] += a * br[n];
      }
      TC* cr = gm.raw() + m * ldc;
      for (int64_t n = 0; n < N; ++n) cr[n] = ::twin::from_float_rint<TC>(acc[n]);
      gm.account(m * ldc * sizeof(TC), N * sizeof(TC), true);
      ::twin::tick();
    }
  }
  __aicore__ inline void End() {
    on_cube("Matmul::End");
    has_a_ = has_b_ = false;
  }

 private:
  void on_cube(const char* api) {
    ::twin::tick();
    if (::twin::core().type != ::twin::CoreType::AIC) {
      ::twin::fail("matmul-on-vector", ::twin::str(api, " on a vector core: in cube-only mode the Matmul runs on the AIC"));
    }
    if (!inited_ && std::string(api) != "Matmul::Init") ::twin::fail("matmul-order", ::twin::str(api, " before REGIST_MATMUL_OBJ/Init"));
  }
  TCubeTiling tiling_{};
  bool inited_ = false, has_a_ = false, has_b_ = false, b_loaded_ = false;
  int m_ = 0, n_ = 0, k_ = 0;
  AscendC::GlobalTensor<TA> a_;
  AscendC::GlobalTensor<TB> b_;
  std::vector<float> bf_;
};

}  // namespace matmul

namespace twin {
// REGIST_MATMUL_OBJ in cube-only mode: Init with the tiling; must precede every InitBuffer.
template <class MM>
inline void regist_matmul(AscendC::TPipe* pipe, GM_ADDR /*workspace*/, MM& mm, const TCubeTiling* tiling) {
  tick();
  if (pipe && !pipe->impl().bufs.empty()) {
    fail("matmul-regist-order", "REGIST_MATMUL_OBJ after TPipe::InitBuffer (it must come first on separated-mode cores)");
  }
  mm.Init(tiling, pipe);
}
}  // namespace twin

#define REGIST_MATMUL_OBJ(tpipe, workspace, mm, tiling) ::twin::regist_matmul(tpipe, workspace, mm, tiling)
