// The portable row kernels compiled for AVX2 + FMA + F16C (this file only), taken at run time on a
// CPU that has them and no AVX-512.
#define NPU_OPS_PORTABLE_NS avx2
#include "cpu_kernel/isa_headers.h"

#define NPU_OPS_ISA_TARGET "avx2,fma,f16c"
#include "cpu_kernel/isa_target_begin.h"
#include "cpu_kernel/rows_portable_impl.h"
#include "cpu_kernel/isa_target_end.h"

namespace npu_ops_transformer_ext {
namespace cpu {
RowsFn avx2_rows_fn(at::ScalarType t, bool is_perm) { return avx2::rows_fn(t, is_perm); }
TableFn avx2_table_fn(at::ScalarType table_dtype, at::ScalarType x_dtype) {
  return avx2::table_fn(table_dtype, x_dtype);
}
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
