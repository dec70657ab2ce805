// The portable row kernels at the baseline ISA, and the run-time choice among all kernel families.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#define NPU_OPS_PORTABLE_NS portable
#include "cpu_kernel/rows_portable_impl.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

enum IsaLevel { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// What this CPU has (and this build compiled), capped by NPU_OPS_CPU_ISA = generic | avx2 | avx512
// | avx512_bf16 (unset or empty: no cap; a family the CPU lacks caps at the widest it has); any
// other value is a ValueError.
int isa_level() {
  static const int cpu_level = [] {
    int level = kGeneric;
#if defined(__GNUC__) || defined(__clang__)
#ifdef NPU_OPS_HAVE_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
      level = kAvx2;
    }
#endif
#ifdef NPU_OPS_HAVE_AVX512
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      level = __builtin_cpu_supports("avx512bf16") ? kAvx512Bf16 : kAvx512;
    }
#endif
#endif
    return level;
  }();
  int level = cpu_level;
  const char* v = std::getenv("NPU_OPS_CPU_ISA");
  if (v == nullptr || *v == '\0') return level;
  static constexpr struct {
    const char* name;
    int level;
  } kCaps[] = {{"generic", kGeneric}, {"avx2", kAvx2}, {"avx512", kAvx512}, {"avx512_bf16", kAvx512Bf16}};
  for (const auto& cap : kCaps) {
    if (std::strcmp(v, cap.name) == 0) return std::min(level, cap.level);
  }
  TORCH_CHECK_VALUE(false, "NPU_OPS_CPU_ISA=\"", v, "\" is not valid: set it to one of generic, avx2, avx512, "
                    "avx512_bf16 (the widest kernel family the CPU kernel may take), or unset it for the "
                    "widest this CPU has");
  return level;
}

}  // namespace

void check_isa_setting() { (void)isa_level(); }

RowsFn generic_rows_fn(at::ScalarType t, bool is_perm) { return portable::rows_fn(t, is_perm); }

TableFn generic_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype) {
  return portable::table_fn(table_dtype, x_dtype);
}

Kernels select_kernels(at::ScalarType x, at::ScalarType sin_t, at::ScalarType cos_t,
                       const RotatePlan& plan) {
  Kernels k{generic_rows_fn(x, plan.is_perm), generic_table_fn(cos_t, x), generic_table_fn(sin_t, x),
            "generic", "portable"};
  const int level = isa_level();
#ifdef NPU_OPS_HAVE_AVX2
  if (level >= kAvx2) {
    k = {avx2_rows_fn(x, plan.is_perm), avx2_table_fn(cos_t, x), avx2_table_fn(sin_t, x), "avx2", "portable"};
  }
#endif
#ifdef NPU_OPS_HAVE_AVX512
  if (level >= kAvx512 && x != at::kDouble) {
    const bool bf16 = level >= kAvx512Bf16;
    const bool raw = raw_tables(x, sin_t, cos_t, plan);
    const RowsChoice rows = bf16 ? avx512_bf16_rows_fn(x, plan, raw) : avx512_rows_fn(x, plan, raw);
    k.rows = rows.fn;
    k.rows_kind = rows.kind;
    k.cos_table = bf16 ? avx512_bf16_table_fn(cos_t, x, plan, raw) : avx512_table_fn(cos_t, x, plan, raw);
    k.sin_table = bf16 ? avx512_bf16_table_fn(sin_t, x, plan, raw) : avx512_table_fn(sin_t, x, plan, raw);
    k.isa = bf16 ? "avx512_bf16" : "avx512";
  }
#endif
  (void)level;
  return k;
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
