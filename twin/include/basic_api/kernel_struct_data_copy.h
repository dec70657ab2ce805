// The twin's data copy parameter structs (asc-devkit kernel_struct_data_copy.h, the A2 branch):
// the real headers' field names, types and order, constructors with the real parameter types. The
// ranges beyond the field widths are rules of twin/copy_rules.h (`datacopy-range`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace AscendC {

// DataCopy with strides: blockLen, srcGap and dstGap in 32-byte blocks. srcStride / dstStride are
// the deprecated names of srcGap / dstGap (a union in the real header, as here).
struct DataCopyParams {
  DataCopyParams() {}
  DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;
  union {
    uint16_t srcGap = 0;
    uint16_t srcStride;
  };
  union {
    uint16_t dstGap = 0;
    uint16_t dstStride;
  };
};

// DataCopyPad: blockLen in bytes; the GM side's stride in bytes, the UB side's in 32-byte blocks.
struct DataCopyExtParams {
  DataCopyExtParams() {}
  DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                    const uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;
  uint32_t srcStride = 0;
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};

// DataCopyPad GM -> UB padding: leftPadding / rightPadding in elements.
template <typename T>
struct DataCopyPadExtParams {
  DataCopyPadExtParams() {}
  DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue{};
};

// The layout the real header gives these structs on A2 (field types in declaration order).
static_assert(std::is_same<decltype(DataCopyParams::blockCount), uint16_t>::value &&
                  std::is_same<decltype(DataCopyParams::blockLen), uint16_t>::value &&
                  std::is_same<decltype(DataCopyParams::srcGap), uint16_t>::value &&
                  std::is_same<decltype(DataCopyParams::dstGap), uint16_t>::value && sizeof(DataCopyParams) == 8 &&
                  offsetof(DataCopyParams, blockLen) == 2 && offsetof(DataCopyParams, srcGap) == 4 &&
                  offsetof(DataCopyParams, srcStride) == 4 && offsetof(DataCopyParams, dstGap) == 6,
              "DataCopyParams: uint16_t blockCount, blockLen, srcGap|srcStride, dstGap|dstStride");
static_assert(std::is_same<decltype(DataCopyExtParams::blockCount), uint16_t>::value &&
                  std::is_same<decltype(DataCopyExtParams::blockLen), uint32_t>::value &&
                  std::is_same<decltype(DataCopyExtParams::srcStride), uint32_t>::value &&
                  std::is_same<decltype(DataCopyExtParams::dstStride), uint32_t>::value &&
                  std::is_same<decltype(DataCopyExtParams::rsv), uint32_t>::value &&
                  offsetof(DataCopyExtParams, blockLen) == 4 && offsetof(DataCopyExtParams, srcStride) == 8 &&
                  offsetof(DataCopyExtParams, dstStride) == 12 && offsetof(DataCopyExtParams, rsv) == 16,
              "DataCopyExtParams: uint16_t blockCount, uint32_t blockLen, srcStride, dstStride, rsv");

}  // namespace AscendC
