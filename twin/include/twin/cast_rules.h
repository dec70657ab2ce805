// The twin's rule `cast-illegal`: the (type pair, round mode) combinations A2's Cast supports (the NPU
// silently leaves dst unchanged for any other). basic_api/kernel_operator_vec_vconv_intf.h calls it.
#pragma once

#include <cstring>

#include "twin/core.h"

namespace twin {

// Round modes in AscendC::RoundMode's order.
inline const char* round_mode_name(int m) {
  static const char* n[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD", "CAST_HYBRID"};
  return m >= 0 && m < 8 ? n[m] : "?";
}

// Legal on A2 (the pairs the kernels use): bf16/half -> float with CAST_NONE; float -> bf16 with
// RINT, FLOOR, CEIL, ROUND or TRUNC; float -> half with any mode but HYBRID.
inline void check_cast(const char* dst, const char* src, int mode) {
  enum { NONE, RINT, FLOOR, CEIL, ROUND, TRUNC, ODD, HYBRID };
  auto is = [](const char* a, const char* b) { return std::strcmp(a, b) == 0; };
  bool legal = false;
  if (is(dst, "float") && (is(src, "bfloat16_t") || is(src, "half"))) legal = mode == NONE;
  else if (is(dst, "bfloat16_t") && is(src, "float")) legal = mode == RINT || mode == FLOOR || mode == CEIL || mode == ROUND || mode == TRUNC;
  else if (is(dst, "half") && is(src, "float")) legal = mode != HYBRID;
  if (!legal) {
    fail("cast-illegal", str("Cast ", src, " -> ", dst, " with ", round_mode_name(mode),
                             " is not supported on A2 (the NPU silently leaves dst unchanged)"));
  }
}

}  // namespace twin
