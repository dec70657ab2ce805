// Portable row kernels and the run-time choice between them and the AVX-512 ones.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdlib>
#include <cstring>

#include "cpu_kernel/rows.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

// Signed permutation: out[j] = x[j]*cos[j] + x[partner[j]]*sin[j] (sign already in sin).
template <typename T, typename C>
void perm_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D;
  C* xf = static_cast<C*>(scratch);  // D + 1 entries; xf[D] = 0 stands for an all-zero column
  const int32_t* partner = plan.partner.data();
  for (int64_t r = 0; r < b.n; ++r) {
    const T* x = static_cast<const T*>(b.x[r]);
    T* out = static_cast<T*>(b.out[r]);
    const C* cs = static_cast<const C*>(b.cos[r]);
    const C* sn = static_cast<const C*>(b.sin[r]);
    for (int64_t j = 0; j < D; ++j) xf[j] = static_cast<C>(x[j]);
    xf[D] = C(0);
    for (int64_t j = 0; j < D; ++j) {
      const int64_t p = partner[j] < 0 ? D : partner[j];
      const C a = xf[j] * cs[j];
      const C s = xf[p] * sn[j];
      out[j] = static_cast<T>(a + s);
    }
  }
}

// Dense y: acc = x @ y accumulated in C, rounded to T (as the NPU cube writes x.dtype), then fused.
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
  for (int64_t r = 0; r < b.n; ++r) {
    const T* x = static_cast<const T*>(b.x[r]);
    T* out = static_cast<T*>(b.out[r]);
    const C* cs = static_cast<const C*>(b.cos[r]);
    const C* sn = static_cast<const C*>(b.sin[r]);
    for (int64_t j = 0; j < D; ++j) {
      xf[j] = static_cast<C>(x[j]);
      acc[j] = C(0);
    }
    for (int64_t i = 0; i < D; ++i) {
      const C xi = xf[i];
      const C* yi = y + i * Dp;
      for (int64_t j = 0; j < D; ++j) acc[j] += xi * yi[j];
    }
    for (int64_t j = 0; j < D; ++j) {
      const C xy = static_cast<C>(static_cast<T>(acc[j]));
      const C a = xf[j] * cs[j];
      const C s = xy * sn[j];
      out[j] = static_cast<T>(a + s);
    }
  }
}

template <typename T, typename C>
RowsFn pick(bool is_perm) {
  return is_perm ? &perm_rows<T, C> : &dense_rows<T, C>;
}

bool force_generic() {
  const char* v = std::getenv("NPU_OPS_CPU_ISA");
  return v != nullptr && std::strcmp(v, "generic") == 0;
}

bool cpu_has_avx512() {
#if defined(NPU_OPS_HAVE_AVX512) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

}  // namespace

RowsFn generic_rows_fn(at::ScalarType t, bool is_perm) {
  switch (t) {
    case at::kBFloat16: return pick<c10::BFloat16, float>(is_perm);
    case at::kHalf: return pick<c10::Half, float>(is_perm);
    case at::kFloat: return pick<float, float>(is_perm);
    case at::kDouble: return pick<double, double>(is_perm);
    default: TORCH_CHECK(false, "rope_matrix: no CPU kernel for dtype ", t);
  }
}

const char* cpu_isa_name() { return (!force_generic() && cpu_has_avx512()) ? "avx512" : "generic"; }

RowsFn select_rows_fn(at::ScalarType t, const RotatePlan& plan) {
#ifdef NPU_OPS_HAVE_AVX512
  if (!force_generic() && cpu_has_avx512()) {
    if (RowsFn f = avx512_rows_fn(t, plan.is_perm)) return f;
  }
#endif
  return generic_rows_fn(t, plan.is_perm);
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
