// The twin's DataCopy / DataCopyPad between GM and UB, and DataCopy UB -> UB (asc-devkit
// kernel_operator_data_copy_intf.h).
#pragma once

#include "basic_api/kernel_struct_data_copy.h"
#include "basic_api/kernel_tensor.h"
#include "twin/copy_rules.h"

namespace AscendC {

// GM -> UB, `count` elements; count * sizeof(T) must be a multiple of 32 bytes.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  ::twin::require_aiv("DataCopy(GM->UB)");
  dst.check_gm_to_ub_position("DataCopy(GM->UB)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ::twin::check_count_copy_length("DataCopy(GM->UB)", count, ::twin::type_name<T>(), bytes);
  dst.check(count, ::twin::Role::MteIn, "DataCopy(GM->UB)");
  src.check(0, count, false, "DataCopy(GM->UB)");
  src.account(0, bytes, false);
  ::twin::issue(::twin::kPipeMte2, "DataCopy(GM->UB)");
  dst.touch(::twin::kPipeMte2, 0, bytes, true);
  dst.set_defined(0, bytes, true);
  std::memcpy(dst.ptr(), src.raw(), bytes);
}

// UB -> GM, `count` elements.
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  ::twin::require_aiv("DataCopy(UB->GM)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ::twin::check_count_copy_length("DataCopy(UB->GM)", count, ::twin::type_name<T>(), bytes);
  src.check(count, ::twin::Role::MteOut, "DataCopy(UB->GM)");
  dst.check(0, count, true, "DataCopy(UB->GM)");
  dst.account(0, bytes, true);
  ::twin::issue(::twin::kPipeMte3, "DataCopy(UB->GM)");
  dst.mte3_write(0, bytes);
  src.touch(::twin::kPipeMte3, 0, bytes, false);
  src.require_defined("DataCopy(UB->GM)", 0, bytes);
  std::memcpy(dst.raw(), src.ptr(), bytes);
}

// GM -> UB strided: blockLen and gaps in 32-byte blocks.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
  ::twin::tick();
  ::twin::require_aiv("DataCopy(GM->UB, params)");
  dst.check_gm_to_ub_position("DataCopy(GM->UB, params)");
  ::twin::check_copy_params("DataCopy(GM->UB, params)", p.blockCount);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sg = p.srcStride * 32ull, dg = p.dstStride * 32ull;
  const uint64_t src_span = p.blockCount * blen + (p.blockCount - 1) * sg;
  const uint64_t dst_span = p.blockCount * blen + (p.blockCount - 1) * dg;
  dst.check((dst_span + sizeof(T) - 1) / sizeof(T), ::twin::Role::MteIn, "DataCopy(GM->UB, params)");
  src.check_span(0, src_span, p.blockCount * blen, false, "DataCopy(GM->UB, params)");
  ::twin::issue(::twin::kPipeMte2, "DataCopy(GM->UB, params)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    src.account(i * (blen + sg), blen, false);
    dst.touch(::twin::kPipeMte2, i * (blen + dg), blen, true);
    dst.set_defined(i * (blen + dg), blen, true);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.ptr()) + i * (blen + dg),
                reinterpret_cast<const uint8_t*>(src.raw()) + i * (blen + sg), blen);
  }
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ::twin::tick();
  ::twin::require_aiv("DataCopy(UB->GM, params)");
  ::twin::check_copy_params("DataCopy(UB->GM, params)", p.blockCount);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sg = p.srcStride * 32ull, dg = p.dstStride * 32ull;
  const uint64_t src_span = p.blockCount * blen + (p.blockCount - 1) * sg;
  const uint64_t dst_span = p.blockCount * blen + (p.blockCount - 1) * dg;
  src.check((src_span + sizeof(T) - 1) / sizeof(T), ::twin::Role::MteOut, "DataCopy(UB->GM, params)");
  dst.check_span(0, dst_span, p.blockCount * blen, true, "DataCopy(UB->GM, params)");
  ::twin::issue(::twin::kPipeMte3, "DataCopy(UB->GM, params)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    dst.account(i * (blen + dg), blen, true);
    dst.mte3_write(i * (blen + dg), blen);
    src.touch(::twin::kPipeMte3, i * (blen + sg), blen, false);
    src.require_defined("DataCopy(UB->GM, params)", i * (blen + sg), blen);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.raw()) + i * (blen + dg),
                reinterpret_cast<const uint8_t*>(src.ptr()) + i * (blen + sg), blen);
  }
}

// GM -> UB, any byte length: blockLen bytes per block, GM gap in bytes, UB gap in 32-byte blocks;
// each block lands 32-byte aligned in UB, the tail of its last 32 bytes is padding.
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                                   const DataCopyPadExtParams<T>& pad) {
  ::twin::tick();
  ::twin::require_aiv("DataCopyPad(GM->UB)");
  ::twin::check_ext_params("DataCopyPad(GM->UB)", p.blockCount, p.blockLen, sizeof(T), ::twin::type_name<T>());
  ::twin::check_pad_params("DataCopyPad(GM->UB)", pad.leftPadding, pad.rightPadding, sizeof(T));
  dst.check_gm_to_ub_position("DataCopyPad(GM->UB)");
  if (p.blockCount == 0 || p.blockLen == 0) return;
  if (pad.leftPadding || pad.rightPadding) {
    ::twin::fail("twin-unmodelled", "DataCopyPad with left/right padding is not modelled by the twin");
  }
  const uint64_t blen = p.blockLen, ub_block = (blen + 31) / 32 * 32, ub_pitch = ub_block + p.dstStride * 32ull;
  const uint64_t gm_pitch = blen + p.srcStride;
  dst.check(((p.blockCount - 1) * ub_pitch + ub_block) / sizeof(T), ::twin::Role::MteIn, "DataCopyPad(GM->UB)");
  src.check_span(0, (p.blockCount - 1) * gm_pitch + blen, p.blockCount * blen, false, "DataCopyPad(GM->UB)");
  auto* d = reinterpret_cast<uint8_t*>(dst.ptr());
  ::twin::issue(::twin::kPipeMte2, "DataCopyPad(GM->UB)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    src.account(i * gm_pitch, blen, false);
    dst.touch(::twin::kPipeMte2, i * ub_pitch, ub_block, true);
    dst.set_defined(i * ub_pitch, blen, true);
    dst.set_defined(i * ub_pitch + blen, ub_block - blen, pad.isPad);  // padding without a value: undefined
    std::memcpy(d + i * ub_pitch, reinterpret_cast<const uint8_t*>(src.raw()) + i * gm_pitch, blen);
    // Padding: the pad value when requested, otherwise "undefined" -> poison (all-ones bytes, a NaN).
    for (uint64_t b = blen; b < ub_block; b += sizeof(T)) {
      if (pad.isPad) std::memcpy(d + i * ub_pitch + b, &pad.paddingValue, sizeof(T));
      else std::memset(d + i * ub_pitch + b, 0xff, sizeof(T));
    }
  }
}

// UB -> GM, any byte length: exactly blockLen bytes per block reach GM; UB gap in 32-byte blocks,
// GM gap in bytes.
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  ::twin::tick();
  ::twin::require_aiv("DataCopyPad(UB->GM)");
  ::twin::check_ext_params("DataCopyPad(UB->GM)", p.blockCount, p.blockLen, sizeof(T), ::twin::type_name<T>());
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen, ub_block = (blen + 31) / 32 * 32, ub_pitch = ub_block + p.srcStride * 32ull;
  const uint64_t gm_pitch = blen + p.dstStride;
  src.check(((p.blockCount - 1) * ub_pitch + ub_block) / sizeof(T), ::twin::Role::MteOut, "DataCopyPad(UB->GM)");
  dst.check_span(0, (p.blockCount - 1) * gm_pitch + blen, p.blockCount * blen, true, "DataCopyPad(UB->GM)");
  const auto* s = reinterpret_cast<const uint8_t*>(src.ptr());
  ::twin::issue(::twin::kPipeMte3, "DataCopyPad(UB->GM)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    dst.account(i * gm_pitch, blen, true);
    dst.mte3_write(i * gm_pitch, blen);
    src.touch(::twin::kPipeMte3, i * ub_pitch, blen, false);
    src.require_defined("DataCopyPad(UB->GM)", i * ub_pitch, blen);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.raw()) + i * gm_pitch, s + i * ub_pitch, blen);
  }
}
// UB -> UB copy of count elements (a multiple of 32 bytes), bit for bit.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  ::twin::require_aiv("DataCopy(UB->UB)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ::twin::check_count_copy_length("DataCopy(UB->UB)", count, ::twin::type_name<T>(), bytes);
  src.check(count, ::twin::Role::VecRead, "DataCopy(UB->UB)");
  dst.check(count, ::twin::Role::VecWrite, "DataCopy(UB->UB)");
  ::twin::check_overlap("DataCopy(UB->UB)", dst.off_, bytes, src.off_, bytes, true);
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
  ::twin::require_aiv(api);
  ::twin::check_copy_params(api, p.blockCount);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sPitch = blen + p.srcStride * 32ull, dPitch = blen + p.dstStride * 32ull;
  const uint64_t sSpan = (p.blockCount - 1) * sPitch + blen, dSpan = (p.blockCount - 1) * dPitch + blen;
  src.check(sSpan / sizeof(T), ::twin::Role::VecRead, api);
  dst.check(dSpan / sizeof(T), ::twin::Role::VecWrite, api);
  ::twin::check_overlap(api, dst.off_, dSpan, src.off_, sSpan, false);
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
