// The twin's Gather (level 2), Duplicate and UB -> UB DataCopy (count and strided forms), as asc-devkit declares them
// (kernel_operator_vec_gather_intf.h, kernel_operator_vec_duplicate_intf.h,
// kernel_operator_data_copy_intf.h). Included at the end of kernel_operator.h.
#pragma once

namespace AscendC {

// dst[i] = the element of src at byte offset srcOffset[i] + srcBaseOffset, for i < count. Every
// offset must be a multiple of sizeof(T) and lie inside src's buffer (the NPU would read any UB).
template <typename T>
__aicore__ inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                              const uint32_t srcBaseOffset, const uint32_t count) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather: A2 gathers 16- or 32-bit elements");
  ::twin::tick();
  detail::require_aiv("Gather");
  if (count == 0) return;
  srcOffset.check(count, ::twin::Role::VecRead, "Gather (offsets)");
  dst.check(count, ::twin::Role::VecWrite, "Gather");
  src.check(0, ::twin::Role::VecRead, "Gather (src)");
  const uint64_t srcBytes = static_cast<uint64_t>(src.GetSize()) * sizeof(T);
  const uint32_t* off = srcOffset.ptr();
  const uint8_t* base = reinterpret_cast<const uint8_t*>(src.ptr());
  std::vector<T> tmp(count);
  std::vector<uint8_t> tdef(count);
  const uint8_t* od = srcOffset.defs();
  const uint8_t* sd = src.defs();
  uint64_t lo = ~0ull, hi = 0;  // dst may alias src on the NPU only through separate instructions
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t o = static_cast<uint64_t>(off[i]) + srcBaseOffset;
    if (o % sizeof(T) != 0 || o + sizeof(T) > srcBytes) {
      ::twin::fail("gather-offset", ::twin::str("Gather offset[", i, "] = ", off[i], " (+ base ", srcBaseOffset,
                                                ") is not a multiple of ", sizeof(T), " inside the ", srcBytes,
                                                "-byte source"));
    }
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

// dst[i] = scalarValue for i < count.
template <typename T>
__aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  ::twin::tick();
  detail::require_aiv("Duplicate");
  if (count < 0) ::twin::fail("vector-count", ::twin::str("Duplicate: count ", count, " < 0"));
  if (count == 0) return;
  dst.check(count, ::twin::Role::VecWrite, "Duplicate");
  ::twin::issue(::twin::kPipeV, "Duplicate");
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  dst.set_defined(0, count * sizeof(T), true);
  T* d = dst.ptr();
  for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

// UB -> UB copy of count elements (a multiple of 32 bytes), bit for bit.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  detail::require_aiv("DataCopy(UB->UB)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  if (bytes % ::twin::kBlockBytes != 0) {
    ::twin::fail("datacopy-align", ::twin::str("DataCopy(UB->UB) of ", bytes, " bytes, not a multiple of 32"));
  }
  src.check(count, ::twin::Role::VecRead, "DataCopy(UB->UB)");
  dst.check(count, ::twin::Role::VecWrite, "DataCopy(UB->UB)");
  detail::check_overlap("DataCopy(UB->UB)", dst, src, static_cast<int32_t>(count));
  // copy_ubuf_to_ubuf is issued on the vector pipe
  ::twin::issue(::twin::kPipeV, "DataCopy(UB->UB)");
  src.touch(::twin::kPipeV, 0, bytes, false);
  dst.touch(::twin::kPipeV, 0, bytes, true);
  std::memmove(dst.ptr(), src.ptr(), bytes);
  std::memmove(dst.defs(), src.defs(), bytes);
}

// UB -> UB strided copy: blockCount blocks of blockLen 32-byte units, each followed by srcStride
// (source) and dstStride (destination) 32-byte units of gap; bit for bit, on the vector pipe.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ::twin::tick();
  const char* api = "DataCopy(UB->UB, params)";
  detail::require_aiv(api);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sPitch = blen + p.srcStride * 32ull, dPitch = blen + p.dstStride * 32ull;
  const uint64_t sSpan = (p.blockCount - 1) * sPitch + blen, dSpan = (p.blockCount - 1) * dPitch + blen;
  src.check(sSpan / sizeof(T), ::twin::Role::VecRead, api);
  dst.check(dSpan / sizeof(T), ::twin::Role::VecWrite, api);
  if (dst.off_ < src.off_ + sSpan && src.off_ < dst.off_ + dSpan) {
    ::twin::fail("vector-overlap", ::twin::str(api, ": dst UB [", dst.off_, ", ", dst.off_ + dSpan, ") overlaps src [",
                                               src.off_, ", ", src.off_ + sSpan, ")"));
  }
  ::twin::issue(::twin::kPipeV, api);
  auto* d = reinterpret_cast<uint8_t*>(dst.ptr());
  const auto* s = reinterpret_cast<const uint8_t*>(src.ptr());
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    src.touch(::twin::kPipeV, i * sPitch, blen, false);
    dst.touch(::twin::kPipeV, i * dPitch, blen, true);
    std::memcpy(d + i * dPitch, s + i * sPitch, blen);
    std::memcpy(dst.defs() + i * dPitch, src.defs() + i * sPitch, blen);
  }
}

}  // namespace AscendC
