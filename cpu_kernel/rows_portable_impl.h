// Portable row kernels (plain C++; the compiler vectorises what it can). Included by
// rows_generic.cpp (baseline ISA) and by rows_avx2.cpp (under an AVX2/FMA/F16C target pragma).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>

#include "cpu_kernel/rows.h"

namespace npu_ops_transformer_ext {
namespace cpu {
namespace NPU_OPS_PORTABLE_NS {

// Signed permutation: out[j] = x[j]*cos[j] + x[partner[j]]*sin[j] (sign already in sin).
template <typename T, typename C>
void perm_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D;
  C* xf = static_cast<C*>(scratch);  // D + 1 entries; xf[D] = 0 stands for an all-zero column
  const int32_t* partner = plan.partner.data();
  for (int64_t i = 0; i < b.n(); ++i) {
    const int64_t r = i / b.hn, h = i % b.hn;
    const auto [x, out, cs, sn] = BatchRow<T, C>(b, r, h);
    for (int64_t j = 0; j < D; ++j) xf[j] = static_cast<C>(x[j]);
    xf[D] = C(0);
    if (plan.pair_swap) {
      // Interleave: each pair (2k, 2k+1) swaps; contiguous, vectorisable.
      for (int64_t j = 0; j < D; j += 2) {
        const C x0 = xf[j], x1 = xf[j + 1];
        const C a0 = x0 * cs[j], s0 = x1 * sn[j];
        const C a1 = x1 * cs[j + 1], s1 = x0 * sn[j + 1];
        out[j] = static_cast<T>(a0 + s0);
        out[j + 1] = static_cast<T>(a1 + s1);
      }
    } else if (static_cast<int64_t>(plan.runs.size()) * 4 <= D) {
      // Long runs of consecutive partners (half, quarter, 2D/3D splits): contiguous loops.
      for (const auto& run : plan.runs) {
        const C* src = run.src < 0 ? nullptr : xf + run.src - run.begin;
        for (int64_t j = run.begin; j < run.end; ++j) {
          const C a = xf[j] * cs[j];
          const C s = (src != nullptr ? src[j] : C(0)) * sn[j];
          out[j] = static_cast<T>(a + s);
        }
      }
    } else {
      for (int64_t j = 0; j < D; ++j) {
        const int64_t p = partner[j] < 0 ? D : partner[j];
        const C a = xf[j] * cs[j];
        const C s = xf[p] * sn[j];
        out[j] = static_cast<T>(a + s);
      }
    }
  }
}

// a * b + c with one rounding (an FMA instruction where the ISA has one; a libm call on the
// x86-64 baseline, which only a test or a very old CPU runs), as the AVX-512 GEMM computes it.
inline float fused_multiply_add(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double fused_multiply_add(double a, double b, double c) { return __builtin_fma(a, b, c); }

// Dense y: acc = x @ y accumulated in C (one fused multiply-add per step), rounded to T (as the NPU cube writes x.dtype), then fused.
template <typename T, typename C>
void dense_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D, Dp = plan.Dp;
  C* xf = static_cast<C*>(scratch);
  C* acc = xf + Dp + kLanes;
  const C* y = nullptr;
  if constexpr (std::is_same_v<C, double>) {
    y = plan.y64.data();
  } else {
    y = plan.y32.data();
  }
  const bool pairwise = dense_pairwise(plan, std::is_same_v<T, c10::BFloat16>);
  for (int64_t i = 0; i < b.n(); ++i) {
    const int64_t r = i / b.hn, h = i % b.hn;
    const auto [x, out, cs, sn] = BatchRow<T, C>(b, r, h);
    for (int64_t j = 0; j < D; ++j) {
      xf[j] = static_cast<C>(x[j]);
      acc[j] = C(0);
    }
    for (int64_t k = 0; k < D; ++k) {  // rows of y in the order every ISA takes (rotate_plan.h)
      const int64_t i = dense_row_order(k, D, pairwise);
      const C xi = xf[i];
      const C* yi = y + i * Dp;
      for (int64_t j = 0; j < D; ++j) acc[j] = fused_multiply_add(xi, yi[j], acc[j]);
    }
    for (int64_t j = 0; j < D; ++j) {
      const C xy = static_cast<C>(static_cast<T>(acc[j]));
      const C a = xf[j] * cs[j];
      const C s = xy * sn[j];
      out[j] = static_cast<T>(a + s);
    }
  }
}

template <typename Tt, typename C>
void table_row(const void* src, int64_t D, int64_t Dp, const uint32_t* sign_bits, void* dst_v) {
  const Tt* p = static_cast<const Tt*>(src);
  C* dst = static_cast<C*>(dst_v);
  for (int64_t j = 0; j < D; ++j) {
    const C v = static_cast<C>(p[j]);
    dst[j] = (sign_bits != nullptr && sign_bits[j] != 0) ? -v : v;
  }
  for (int64_t j = D; j < Dp; ++j) dst[j] = C(0);
}

template <typename C>
TableFn table_for(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return &table_row<c10::BFloat16, C>;
    case at::kHalf: return &table_row<c10::Half, C>;
    case at::kFloat: return &table_row<float, C>;
    case at::kDouble: return &table_row<double, C>;
    default: TORCH_CHECK(false, "rope_matrix: no CPU table conversion for dtype ", t);
  }
}

template <typename T, typename C>
RowsFn pick(bool is_perm) {
  return is_perm ? &perm_rows<T, C> : &dense_rows<T, C>;
}

inline RowsFn rows_fn(at::ScalarType t, bool is_perm) {
  switch (t) {
    case at::kBFloat16: return pick<c10::BFloat16, float>(is_perm);
    case at::kHalf: return pick<c10::Half, float>(is_perm);
    case at::kFloat: return pick<float, float>(is_perm);
    case at::kDouble: return pick<double, double>(is_perm);
    default: TORCH_CHECK(false, "rope_matrix: no CPU kernel for dtype ", t);
  }
}

inline TableFn table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype) {
  return x_dtype == at::kDouble ? table_for<double>(table_dtype) : table_for<float>(table_dtype);
}

}  // namespace NPU_OPS_PORTABLE_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
