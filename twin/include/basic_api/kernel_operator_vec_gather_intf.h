// The twin's Gather, level 2 (asc-devkit kernel_operator_vec_gather_intf.h).
#pragma once

#include <algorithm>
#include <vector>

#include "basic_api/kernel_tensor.h"

namespace AscendC {

// dst[i] = the element of src at byte offset srcOffset[i] + srcBaseOffset, for i < count. Every
// offset must be a multiple of sizeof(T) and lie inside src's buffer (the NPU would read any UB).
template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                              const uint32_t srcBaseOffset, const uint32_t count) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather: A2 gathers 16- or 32-bit elements");
  ::twin::tick();
  ::twin::require_aiv("Gather");
  if (count == 0) return;
  srcOffset.check(count, ::twin::Role::VecRead, "Gather (offsets)");
  dst.check(count, ::twin::Role::VecWrite, "Gather");
  src.check(0, ::twin::Role::VecRead, "Gather (src)");
  const uint64_t srcBytes = static_cast<uint64_t>(src.GetSize()) * sizeof(T);
  {  // `gather-alias`: dst must not overlap src (Gather.md, 约束说明)
    const uint64_t d0 = reinterpret_cast<uintptr_t>(dst.ptr()), d1 = d0 + static_cast<uint64_t>(count) * sizeof(T);
    const uint64_t s0 = reinterpret_cast<uintptr_t>(src.ptr()), s1 = s0 + srcBytes;
    if (d0 < s1 && s0 < d1) ::twin::fail("gather-alias", "Gather: dst overlaps src (they must not alias)");
  }
  const uint32_t* off = srcOffset.ptr();
  const uint8_t* base = reinterpret_cast<const uint8_t*>(src.ptr());
  std::vector<T> tmp(count);
  std::vector<uint8_t> tdef(count);
  const uint8_t* od = srcOffset.defs();
  const uint8_t* sd = src.defs();
  uint64_t lo = ~0ull, hi = 0;  // dst may alias src on the NPU only through separate instructions
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t o = static_cast<uint64_t>(off[i]) + srcBaseOffset;
    ::twin::check_gather_offset(i, off[i], srcBaseOffset, sizeof(T), srcBytes);
    std::memcpy(&tmp[i], base + o, sizeof(T));
    tdef[i] = ::twin::all_defined(od + i * 4, 4) && ::twin::all_defined(sd + o, sizeof(T));
    lo = std::min<uint64_t>(lo, o);
    hi = std::max<uint64_t>(hi, o + sizeof(T));
  }
  ::twin::issue(::twin::kPipeV, "Gather");
  srcOffset.touch(::twin::kPipeV, 0, count * sizeof(uint32_t), false);
  src.touch(::twin::kPipeV, lo, hi - lo, false);  // the span the offsets reach
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  std::memcpy(dst.ptr(), tmp.data(), count * sizeof(T));
  uint8_t* dd = dst.defs();
  for (uint32_t i = 0; i < count; ++i) std::memset(dd + i * sizeof(T), tdef[i], sizeof(T));
}

}  // namespace AscendC
