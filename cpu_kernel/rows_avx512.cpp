// AVX-512F/BW/VL/DQ row kernels (see rows_avx512_impl.h).
#define NPU_OPS_AVX512_NS avx512
#include "cpu_kernel/isa_headers.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif
#include "cpu_kernel/rows_avx512_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

namespace npu_ops_transformer_ext {
namespace cpu {
RowsFn avx512_rows_fn(at::ScalarType t, const RotatePlan& plan) { return avx512::rows_fn(t, plan); }
TableFn avx512_table_fn(at::ScalarType t) { return avx512::table_fn(t); }
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
