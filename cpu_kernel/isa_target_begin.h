// Compiles the code that follows for NPU_OPS_ISA_TARGET (a target string such as "avx2,fma,f16c"),
// until isa_target_end.h. Include isa_headers.h first: headers must keep the baseline ISA.
// (No include guard: each ISA file includes it once, around its kernels.)
#define NPU_OPS_ISA_STR(x) #x
#define NPU_OPS_ISA_PRAGMA(x) _Pragma(NPU_OPS_ISA_STR(x))
#if defined(__clang__)
NPU_OPS_ISA_PRAGMA(clang attribute push(__attribute__((target(NPU_OPS_ISA_TARGET))), apply_to = function))
#elif defined(__GNUC__)
#pragma GCC push_options
NPU_OPS_ISA_PRAGMA(GCC target(NPU_OPS_ISA_TARGET))
#endif
