// The twin's vector arithmetic with a scalar operand, count form (asc-devkit
// kernel_operator_vec_binary_scalar_intf.h).
#pragma once

#include "basic_api/kernel_operator_vec_binary_intf.h"

namespace AscendC {

template <typename T>
__aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalar, const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Muls: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  const float s = ::twin::to_float(scalar);
  detail::binary("Muls", dst, src, src, count, [s](float x, float) { return x * s; });
}
template <typename T>
__aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalar, const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Adds: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  const float s = ::twin::to_float(scalar);
  detail::binary("Adds", dst, src, src, count, [s](float x, float) { return x + s; });
}
}  // namespace AscendC
