// The twin's vector binary arithmetic, count form (asc-devkit kernel_operator_vec_binary_intf.h).
#pragma once

#include "basic_api/kernel_tensor.h"

namespace AscendC {

namespace detail {
template <typename T>
constexpr bool vec_arith_type = std::is_same<T, half>::value || std::is_same<T, float>::value ||
                                std::is_same<T, int16_t>::value || std::is_same<T, int32_t>::value;

template <typename D, typename S>
inline void check_overlap(const char* api, const LocalTensor<D>& dst, const LocalTensor<S>& src, int32_t count) {
  ::twin::check_overlap(api, dst.off_, static_cast<uint64_t>(count) * sizeof(D), src.off_,
                        static_cast<uint64_t>(count) * sizeof(S), sizeof(D) == sizeof(S));
}

// dst[i] = f(a[i], b[i]) for count elements on the vector pipe, with the operand checks; the UB
// initcheck: an element is defined when every operand element is.
template <typename T, typename F>
inline void elementwise(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                        int32_t count, F f) {
  ::twin::tick();
  ::twin::require_aiv(api);
  if (count < 0) ::twin::fail("vector-count", ::twin::str(api, ": count ", count, " < 0"));
  if (count == 0) return;
  a.check(count, ::twin::Role::VecRead, api);
  b.check(count, ::twin::Role::VecRead, api);
  dst.check(count, ::twin::Role::VecWrite, api);
  check_overlap(api, dst, a, count);
  check_overlap(api, dst, b, count);
  ::twin::issue(::twin::kPipeV, api);
  a.touch(::twin::kPipeV, 0, count * sizeof(T), false);
  b.touch(::twin::kPipeV, 0, count * sizeof(T), false);
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  T* d = dst.ptr();
  const T* x = a.ptr();
  const T* y = b.ptr();
  uint8_t* dd = dst.defs();
  const uint8_t* ad = a.defs();
  const uint8_t* bd = b.defs();
  for (int32_t i = 0; i < count; ++i) {
    d[i] = f(x[i], y[i]);
    const bool v = ::twin::all_defined(ad + i * sizeof(T), sizeof(T)) && ::twin::all_defined(bd + i * sizeof(T), sizeof(T));
    std::memset(dd + i * sizeof(T), v, sizeof(T));
  }
}

// Bitwise operations on the integers themselves.
template <typename T, typename F>
inline void bitwise(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                    int32_t count, F f) {
  elementwise(api, dst, a, b, count, f);
}

template <typename T>
constexpr bool vec_bit16_type = std::is_same<T, int16_t>::value || std::is_same<T, uint16_t>::value;
template <typename T>
constexpr bool vec_shift_type = vec_bit16_type<T> || std::is_same<T, int32_t>::value || std::is_same<T, uint32_t>::value;

// Arithmetic in fp32, rounded once to T (RINT) unless T is float.
template <typename T, typename F>
inline void binary(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                   int32_t count, F f) {
  elementwise(api, dst, a, b, count, [&](T x, T y) -> T {
    if constexpr (std::is_same<T, float>::value) {
      return f(x, y);
    } else {
      return ::twin::from_float_rint<T>(f(::twin::to_float(x), ::twin::to_float(y)));
    }
  });
}
}  // namespace detail

template <typename T>
__aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Add: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Add", dst, src0, src1, count, [](float x, float y) { return x + y; });
}
template <typename T>
__aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Sub: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Sub", dst, src0, src1, count, [](float x, float y) { return x - y; });
}
template <typename T>
__aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Mul: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Mul", dst, src0, src1, count, [](float x, float y) { return x * y; });
}
// A2 takes int16_t/uint16_t only (asc-devkit docs/zh/api, Memory矢量计算/逻辑计算/Or.md; wider words
// through a 16-bit ReinterpretCast view, as those docs advise).
template <typename T>
__aicore__ inline void Or(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                          const int32_t& count) {
  static_assert(detail::vec_bit16_type<T>, "Or: A2 supports int16_t and uint16_t only (view wider words as 16-bit)");
  detail::bitwise("Or", dst, src0, src1, count, [](T x, T y) { return static_cast<T>(x | y); });
}
}  // namespace AscendC
