// The dense rows: a register-blocked GEMM with fp32 accumulation (or AVX512_BF16 dot products where
// exact), fused with the elementwise step.
//
// Part of rows_avx512_impl.h (one ISA namespace per including file, under its target pragma);
// included only from there, in this order: common, chunks, dense, pairs.
#pragma once

namespace npu_ops_transformer_ext {
namespace cpu {
namespace NPU_OPS_AVX512_NS {

// Dense y, four rows at a time so each loaded vector of y serves four accumulators, 64 columns per
// pass. The driver loads the rows (fp32, plus bf16 copies for the dot-product GEMM: in place, a
// row is overwritten while later column blocks still need it), runs the GEMM policy, and finishes
// each pass with the elementwise step.
constexpr int kDenseRows = 4;
constexpr int kDenseVecs = 4;
using DenseAcc = __m512[kDenseRows][kDenseVecs];

template <typename T, typename Gemm>
void dense_rows_driver(const RotatePlan& plan, const RowBatch& b, void* scratch, Gemm gemm) {
  const int64_t D = plan.D, Dp = plan.Dp;
  float* xf = static_cast<float*>(scratch);  // kDenseRows fp32 rows of Dp + 16, then T copies
  const int64_t ld = Dp + kLanes;
  T* xcopy = reinterpret_cast<T*>(xf + kDenseRows * ld);
  static_assert(kDenseRows * (4 + 2) <= kScratchRows * 8, "scratch too small");
  const int64_t n = b.n();
  for (int64_t r0 = 0; r0 < n; r0 += kDenseRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kDenseRows, n - r0));
    const T* xs[kDenseRows];
    // Row i of the batch in table-row order: (i / hn, i % hn).
    const auto row = [&](int64_t i) { return BatchRow<T, float>(b, i / b.hn, i % b.hn); };
    for (int rr = 0; rr < kDenseRows; ++rr) {
      // Missing rows of a short batch repeat the last one (computed, never stored).
      const T* src = row(r0 + (rr < rows ? rr : rows - 1)).x;
      load_row(src, xf + rr * ld, D, Dp);
      std::memcpy(xcopy + rr * ld, src, D * sizeof(T));
      xs[rr] = xcopy + rr * ld;
    }
    for (int64_t j0 = 0; j0 < Dp; j0 += kDenseVecs * kLanes) {
      const int nv = static_cast<int>(std::min<int64_t>(kDenseVecs, (Dp - j0) / kLanes));
      DenseAcc acc;
      for (int rr = 0; rr < kDenseRows; ++rr)
        for (int v = 0; v < kDenseVecs; ++v) acc[rr][v] = _mm512_setzero_ps();
      gemm(acc, xf, ld, xs, j0, nv);
      for (int rr = 0; rr < rows; ++rr) {
        const auto [x, out, cs, sn] = row(r0 + rr);
        for (int v = 0; v < nv; ++v) {
          const int64_t j = j0 + v * kLanes;
          const __m512 xy = Io<T>::round_trip(acc[rr][v]);  // x @ y in x.dtype, as the cube writes it
          const __m512 a = _mm512_mul_ps(_mm512_load_ps(xf + rr * ld + j), _mm512_loadu_ps(cs + j));
          const __m512 s = _mm512_mul_ps(xy, _mm512_loadu_ps(sn + j));
          Io<T>::store(out + j, _mm512_add_ps(a, s), lane_mask(D - j));
        }
      }
    }
  }
}

// fp32 GEMM on the fp32 rows: fp32 FMAs (one rounding per step, as the portable kernels do it)
// over the rows of y in dense_row_order, so the same bits on every ISA.
inline void gemm_fp32(const float* y, int64_t D, int64_t Dp, bool pairwise, DenseAcc& acc, const float* xf,
                      int64_t ld, int64_t j0, int nv) {
  for (int64_t k = 0; k < D; ++k) {
    const int64_t i = dense_row_order(k, D, pairwise);
    const float* yi = y + i * Dp + j0;
    __m512 yv[kDenseVecs];
    for (int v = 0; v < kDenseVecs; ++v) yv[v] = v < nv ? _mm512_loadu_ps(yi + v * kLanes) : _mm512_setzero_ps();
    for (int rr = 0; rr < kDenseRows; ++rr) {
      const __m512 xb = _mm512_set1_ps(xf[rr * ld + i]);
      for (int v = 0; v < kDenseVecs; ++v) acc[rr][v] = _mm512_fmadd_ps(xb, yv[v], acc[rr][v]);
    }
  }
}

template <typename T>
void dense_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D, Dp = plan.Dp;
  const float* y = plan.y32.data();
  const bool pairwise = dense_pairwise(plan, std::is_same_v<T, c10::BFloat16>);
  dense_rows_driver<T>(plan, b, scratch, [&](DenseAcc& acc, const float* xf, int64_t ld, const T* const*, int64_t j0, int nv) {
    gemm_fp32(y, D, Dp, pairwise, acc, xf, ld, j0, nv);
  });
}

#ifdef NPU_OPS_NATIVE_BF16
// Whether every element of the rows xs[0..kDenseRows) is zero or has its absolute bits in
// [lo, hi] (RotatePlan::dp_lo_bits / dp_hi_bits): then no input, product or partial sum of the
// dot-product GEMM is subnormal or overflows, and its result equals gemm_fp32's bit for bit.
inline bool dpbf16_rows_exact(const c10::BFloat16* const* xs, int64_t D, uint16_t lo, uint16_t hi) {
  const __m512i vlo = _mm512_set1_epi16(static_cast<int16_t>(lo));
  const __m512i range = _mm512_set1_epi16(static_cast<int16_t>(hi - lo));
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
  __mmask32 bad = 0;
  for (int rr = 0; rr < kDenseRows; ++rr) {
    for (int64_t j = 0; j < D; j += 2 * kLanes) {
      const __mmask32 m = D - j >= 2 * kLanes ? ~__mmask32(0) : (__mmask32(1) << (D - j)) - 1;
      const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, xs[rr] + j), abs_mask);
      const __mmask32 nonzero = _mm512_test_epi16_mask(v, v);
      bad |= _mm512_mask_cmpgt_epu16_mask(nonzero, _mm512_sub_epi16(v, vlo), range);
    }
  }
  return bad == 0;
}

// bf16 x and a y exact in bf16: the GEMM on AVX512_BF16 dot products (vdpbf16ps: two bf16
// products per fp32 lane, accumulated in fp32, row 2i+1 of y before row 2i), twice the multiply
// rate of fp32 FMAs. vdpbf16ps treats subnormal inputs and results as zero, so a group of rows
// where one could occur (dpbf16_rows_exact) takes gemm_fp32, which gives the same bits as
// vdpbf16ps everywhere else and the IEEE result there.
void dense_rows_dpbf16(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  using T = c10::BFloat16;
  const int64_t D = plan.D, Dp = plan.Dp;
  const T* yp = plan.y_bf16_pairs.data();
  bool dp_exact = true;
  dense_rows_driver<T>(plan, b, scratch, [&](DenseAcc& acc, const float* xf, int64_t ld, const T* const* xs, int64_t j0, int nv) {
    if (j0 == 0) dp_exact = dpbf16_rows_exact(xs, D, plan.dp_lo_bits, plan.dp_hi_bits);
    if (!dp_exact) return gemm_fp32(plan.y32.data(), D, Dp, true, acc, xf, ld, j0, nv);
    for (int64_t i2 = 0; i2 < D / 2; ++i2) {
      const T* yi = yp + (i2 * Dp + j0) * 2;
      __m512i yv[kDenseVecs];
      for (int v = 0; v < kDenseVecs; ++v) {
        yv[v] = v < nv ? _mm512_loadu_si512(yi + v * 2 * kLanes) : _mm512_setzero_si512();
      }
      for (int rr = 0; rr < kDenseRows; ++rr) {
        uint32_t pair;
        std::memcpy(&pair, xs[rr] + 2 * i2, sizeof(pair));
        const __m512i xb = _mm512_set1_epi32(static_cast<int>(pair));
        for (int v = 0; v < kDenseVecs; ++v) {
          acc[rr][v] = _mm512_dpbf16_ps(acc[rr][v], (__m512bh)xb, (__m512bh)yv[v]);
        }
      }
    }
  });
}
#endif

}  // namespace NPU_OPS_AVX512_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
