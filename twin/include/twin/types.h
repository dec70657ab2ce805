// Scalar types of Ascend C kernels on the CPU: half and bfloat16_t with the hardware's rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  static bfloat16_t from_bits(uint16_t b) {
    bfloat16_t r;
    r.bits = b;
    return r;
  }
};

struct half {
  uint16_t bits = 0;
  half() = default;
  static half from_bits(uint16_t b) {
    half r;
    r.bits = b;
    return r;
  }
};

namespace twin {

inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_float(float v) { return v; }
inline float to_float(bfloat16_t v) { return u2f(static_cast<uint32_t>(v.bits) << 16); }
inline float to_float(half v) {
  _Float16 h;
  std::memcpy(&h, &v.bits, 2);
  return static_cast<float>(h);
}
inline float to_float(int16_t v) { return static_cast<float>(v); }
inline float to_float(int32_t v) { return static_cast<float>(v); }

// float -> bfloat16 with round to nearest, ties to even (CAST_RINT). NaN stays a quiet NaN.
inline bfloat16_t bf16_rint(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16_t::from_bits(static_cast<uint16_t>((u >> 16) | 0x0040u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16_t::from_bits(static_cast<uint16_t>(u >> 16));
}
inline bfloat16_t bf16_trunc(float f) { return bfloat16_t::from_bits(static_cast<uint16_t>(f2u(f) >> 16)); }
// Directed roundings on the 16 dropped bits.
inline bfloat16_t bf16_directed(float f, int mode /*0 floor, 1 ceil, 2 round-half-away*/) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return bf16_rint(f);
  const bool neg = u >> 31;
  const uint32_t low = u & 0xffffu;
  uint32_t hi = u >> 16;
  if (low == 0) return bfloat16_t::from_bits(static_cast<uint16_t>(hi));
  bool up;  // increase magnitude?
  if (mode == 0) up = neg;
  else if (mode == 1) up = !neg;
  else up = low >= 0x8000u;
  if (up) hi += 1;
  return bfloat16_t::from_bits(static_cast<uint16_t>(hi));
}

inline half half_rint(float f) {
  _Float16 h = static_cast<_Float16>(f);  // IEEE round to nearest even
  half r;
  std::memcpy(&r.bits, &h, 2);
  return r;
}

template <typename T>
inline T from_float_rint(float f);
template <>
inline float from_float_rint<float>(float f) { return f; }
template <>
inline bfloat16_t from_float_rint<bfloat16_t>(float f) { return bf16_rint(f); }
template <>
inline half from_float_rint<half>(float f) { return half_rint(f); }
template <>
inline int16_t from_float_rint<int16_t>(float f) { return static_cast<int16_t>(std::nearbyint(f)); }
template <>
inline int32_t from_float_rint<int32_t>(float f) { return static_cast<int32_t>(std::nearbyint(f)); }

template <typename T>
inline const char* type_name();
template <>
inline const char* type_name<float>() { return "float"; }
template <>
inline const char* type_name<half>() { return "half"; }
template <>
inline const char* type_name<bfloat16_t>() { return "bfloat16_t"; }
template <>
inline const char* type_name<int16_t>() { return "int16_t"; }
template <>
inline const char* type_name<uint16_t>() { return "uint16_t"; }
template <>
inline const char* type_name<int32_t>() { return "int32_t"; }
template <>
inline const char* type_name<uint32_t>() { return "uint32_t"; }
template <>
inline const char* type_name<uint8_t>() { return "uint8_t"; }

}  // namespace twin
