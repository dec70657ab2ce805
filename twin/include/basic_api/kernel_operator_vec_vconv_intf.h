// The twin's Cast (asc-devkit kernel_operator_vec_vconv_intf.h): dst = src converted with the round mode,
// on A2's legal (type pair, mode) table (twin/cast_rules.h).
#pragma once

#include "basic_api/kernel_tensor.h"
#include "twin/cast_rules.h"

namespace AscendC {

// dst = src converted with `roundMode`, on A2's legal (type pair, mode) table; anything else is a
// hard error here because the NPU silently leaves dst unchanged.
template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint32_t count) {
  ::twin::tick();
  ::twin::require_aiv("Cast");
  if (count == 0) return;
  using M = RoundMode;
  const M m = roundMode;
  constexpr bool up_bf = std::is_same<T, float>::value && std::is_same<U, bfloat16_t>::value;
  constexpr bool up_h = std::is_same<T, float>::value && std::is_same<U, half>::value;
  constexpr bool dn_bf = std::is_same<T, bfloat16_t>::value && std::is_same<U, float>::value;
  constexpr bool dn_h = std::is_same<T, half>::value && std::is_same<U, float>::value;
  ::twin::check_cast(::twin::type_name<T>(), ::twin::type_name<U>(), static_cast<int>(m));
  src.check(count, ::twin::Role::VecRead, "Cast");
  dst.check(count, ::twin::Role::VecWrite, "Cast");
  ::twin::check_overlap("Cast", dst.off_, count * sizeof(T), src.off_, count * sizeof(U), sizeof(T) == sizeof(U));
  if (sizeof(T) != sizeof(U) && dst.off_ == src.off_) {
    ::twin::fail("vector-overlap", "Cast between types of different width in place");
  }
  ::twin::issue(::twin::kPipeV, "Cast");
  src.touch(::twin::kPipeV, 0, count * sizeof(U), false);
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  T* d = dst.ptr();
  const U* s = src.ptr();
  {
    uint8_t* dd = dst.defs();
    const uint8_t* sd = src.defs();
    for (uint32_t i = 0; i < count; ++i) std::memset(dd + i * sizeof(T), ::twin::all_defined(sd + i * sizeof(U), sizeof(U)), sizeof(T));
  }
  for (uint32_t i = 0; i < count; ++i) {
    if constexpr (up_bf || up_h) {
      d[i] = ::twin::to_float(s[i]);
    } else if constexpr (dn_bf) {
      switch (m) {
        case M::CAST_RINT: d[i] = ::twin::bf16_rint(s[i]); break;
        case M::CAST_TRUNC: d[i] = ::twin::bf16_trunc(s[i]); break;
        case M::CAST_FLOOR: d[i] = ::twin::bf16_directed(s[i], 0); break;
        case M::CAST_CEIL: d[i] = ::twin::bf16_directed(s[i], 1); break;
        default: d[i] = ::twin::bf16_directed(s[i], 2); break;
      }
    } else if constexpr (dn_h) {
      if (m != M::CAST_RINT && m != M::CAST_NONE) {
        ::twin::fail("twin-unmodelled", ::twin::str("Cast float -> half with ", ::twin::round_mode_name(static_cast<int>(m)), " is legal but not modelled"));
      }
      d[i] = ::twin::half_rint(s[i]);
    }
  }
}

}  // namespace AscendC
