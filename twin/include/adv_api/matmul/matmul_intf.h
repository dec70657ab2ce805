// The twin's Matmul high-level API (asc-devkit include/adv_api/matmul/matmul_intf.h), cube-only mode
// (ASCENDC_CUBE_ONLY: the Matmul runs on the AIC). C = A @ B over one single-core block, fp32
// accumulation, C rounded to its type with round to nearest even; ND row-major with row stride Ka
// (A), N (B) and N (C) from the tiling. Its rules live in twin/matmul_rules.h.
#pragma once

#include <string>
#include <vector>

#include "kernel_operator.h"
#include "kernel_tiling/kernel_tiling.h"
#include "twin/matmul_l1.h"
#include "twin/matmul_pipes.h"
#include "twin/matmul_rules.h"

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
  static_assert(MM_CFG.kind == CFG_NORM.kind, "twin: only the Norm config (CFG_NORM) is modelled");
  using TBias = typename BIAS_TYPE::T;
  // A2's Matmul type table: bias float (or half) with half/bf16 A and B, float with float A and B.
  // The default BIAS_TYPE = C_TYPE is therefore wrong for bf16 C: pass the bias type explicitly.
  static_assert(std::is_same<TBias, float>::value || (std::is_same<TBias, half>::value && !std::is_same<TA, float>::value),
                "Matmul: A2 allows a float bias type (or half, with half/bf16 A and B); pass BIAS_TYPE explicitly");

 public:
  __aicore__ inline void Init(const TCubeTiling* tiling, AscendC::TPipe* = nullptr) {
    on_cube("Matmul::Init");
    const TCubeTiling& t = *tiling;
    ::twin::check_cube_tiling(t, sizeof(TA));
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
  }
  // Sticky overrides of singleCoreM/N/K; -1 keeps the current value. Unlike CANN's own check the
  // twin rejects 0 and anything above the tiling's single-core size.
  __aicore__ inline void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) {
    on_cube("Matmul::SetTail");
    if (::twin::check_tail(tailM, tiling_.singleCoreM, "tailM")) m_ = tailM;
    if (::twin::check_tail(tailN, tiling_.singleCoreN, "tailN")) n_ = tailN;
    if (::twin::check_tail(tailK, tiling_.singleCoreK, "tailK")) k_ = tailK;
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
    ::twin::timing::matmul_iterate_all(M, N, K, tiling_.baseM, sizeof(TA), b_.region());
    // B's GM reads as the API makes them (twin/matmul_l1.h): nothing keeps B in L1 between two
    // IterateAll calls, within one a K block of B is read once or once per M block.
    const int64_t kIter = (K + tiling_.baseK - 1) / tiling_.baseK, mIter = (M + tiling_.baseM - 1) / tiling_.baseM;
    const int64_t cached = ::twin::b_cached_k_blocks(tiling_.depthB1, kIter, tiling_.stepN);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t reads = ::twin::b_block_reads(k / tiling_.baseK, cached, mIter, tiling_.iterateOrder, tiling_.stepM);
      for (int64_t r = 0; r < reads; ++r) b_.account(k * ldb * sizeof(TB), N * sizeof(TB), false);
    }
    // The work on the pipes, block by block, with the implementation's syncs (twin/matmul_pipes.h).
    const int64_t bM = tiling_.baseM, bN = tiling_.baseN, bK = tiling_.baseK, nIter = (N + bN - 1) / bN;
    pipes_.begin(bM, bN, bK, sizeof(TA), tiling_.dbL0C);
    for (int64_t nb = 0; nb < nIter; ++nb) {
      for (int64_t mb = 0; mb < mIter; ++mb) {
        for (int64_t kb = 0; kb < kIter; ++kb) {
          const bool cachedB = kb < cached;
          const bool firstUse = tiling_.iterateOrder == 1 ? mb % (tiling_.stepM > 0 ? tiling_.stepM : 1) == 0 : mb == 0;
          pipes_.step(std::min(bM, M - mb * bM), std::min(bN, N - nb * bN), std::min(bK, K - kb * bK), kb, kb == 0,
                      kb == kIter - 1, !cachedB || firstUse, cachedB);
        }
      }
    }
    pipes_.end();
    bf_.assign(K * N, 0.f);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) bf_[k * N + n] = ::twin::to_float(b_.raw()[k * ldb + n]);
    std::vector<float> acc(N), arow(K);
    for (int64_t m = 0; m < M; ++m) {
      if (m % bM == 0) ::twin::timing::matmul_m_block(m / bM);
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
  void on_cube(const char* api) { ::twin::check_matmul_call(api, inited_); }
  TCubeTiling tiling_{};
  bool inited_ = false, has_a_ = false, has_b_ = false;
  int m_ = 0, n_ = 0, k_ = 0;
  AscendC::GlobalTensor<TA> a_;
  AscendC::GlobalTensor<TB> b_;
  std::vector<float> bf_;
  ::twin::MatmulPipes pipes_;
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
