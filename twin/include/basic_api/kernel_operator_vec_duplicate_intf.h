// The twin's Duplicate (asc-devkit kernel_operator_vec_duplicate_intf.h).
#pragma once

#include "basic_api/kernel_tensor.h"

namespace AscendC {

// dst[i] = scalarValue for i < count.
template <typename T>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  ::twin::tick();
  ::twin::require_aiv("Duplicate");
  if (count < 0) ::twin::fail("vector-count", ::twin::str("Duplicate: count ", count, " < 0"));
  if (count == 0) return;
  dst.check(count, ::twin::Role::VecWrite, "Duplicate");
  ::twin::issue(::twin::kPipeV, "Duplicate");
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  dst.set_defined(0, count * sizeof(T), true);
  T* d = dst.ptr();
  for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

}  // namespace AscendC
