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

namespace detail {
template <typename T, typename F>
inline void shift(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, int32_t count, F f) {
  ::twin::check_shift_amount(api, static_cast<int64_t>(scalar), 8 * sizeof(T));
  bitwise(api, dst, src, src, count, [&](T x, T) { return f(x, scalar); });
}
}  // namespace detail

// A2: int16_t/uint16_t/int32_t/uint32_t; unsigned types shift logically, signed ones arithmetically;
// the amount lies in [0, 16] for 16-bit and [0, 32] for 32-bit types (asc-devkit docs/zh/api,
// Memory矢量计算/逻辑计算/ShiftLeft.md, ShiftRight.md).
template <typename T, bool isSetMask = true>
__aicore__ inline void ShiftLeft(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                                 const int32_t& count) {
  static_assert(detail::vec_shift_type<T>, "ShiftLeft: A2 supports int16_t, uint16_t, int32_t and uint32_t only");
  using U = typename std::make_unsigned<T>::type;
  detail::shift("ShiftLeft", dst, src, scalarValue, count, [](T x, T n) {
    return n >= static_cast<T>(8 * sizeof(T)) ? T{0} : static_cast<T>(static_cast<U>(x) << n);
  });
}
template <typename T, bool isSetMask = true>
__aicore__ inline void ShiftRight(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                                  const int32_t& count) {
  static_assert(detail::vec_shift_type<T>, "ShiftRight: A2 supports int16_t, uint16_t, int32_t and uint32_t only");
  detail::shift("ShiftRight", dst, src, scalarValue, count, [](T x, T n) {
    const int bits = 8 * sizeof(T);
    if (n >= static_cast<T>(bits)) return std::is_signed<T>::value && x < 0 ? static_cast<T>(-1) : T{0};
    return static_cast<T>(x >> n);  // arithmetic for signed T, logical for unsigned
  });
}
}  // namespace AscendC
