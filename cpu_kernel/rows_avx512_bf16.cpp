// The AVX-512 row kernels again, with AVX512_BF16's one-instruction fp32 -> bf16 rounding.
#define NPU_OPS_AVX512_NS avx512_bf16
#define NPU_OPS_NATIVE_BF16 1
#include "cpu_kernel/isa_headers.h"

#define NPU_OPS_ISA_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c"
#include "cpu_kernel/isa_target_begin.h"
#include "cpu_kernel/rows_avx512_impl.h"
#include "cpu_kernel/isa_target_end.h"

namespace npu_ops_transformer_ext {
namespace cpu {
RowsChoice avx512_bf16_rows_fn(at::ScalarType t, const RotatePlan& plan, bool raw_tables) {
  return avx512_bf16::rows_fn(t, plan, raw_tables);
}
TableFn avx512_bf16_table_fn(at::ScalarType t, at::ScalarType x_dtype, const RotatePlan& plan, bool raw_tables) {
  return avx512_bf16::table_fn(t, x_dtype, plan, raw_tables);
}
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
