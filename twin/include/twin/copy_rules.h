// The twin's rules on data copies between GM and UB: lengths and the ranges of the parameter structs
// (basic_api/kernel_operator_data_copy_intf.h calls them before it moves a byte).
#pragma once

#include <cstdint>

#include "twin/core.h"

namespace twin {

// `datacopy-align`: the count form moves whole 32-byte blocks; the NPU silently rounds a length
// that is not a multiple of 32 down.
inline void check_count_copy_length(const char* api, uint64_t count, const char* type, uint64_t bytes) {
  if (bytes % kBlockBytes != 0) {
    fail("datacopy-align", str(api, " of ", count, " x ", type, " = ", bytes,
                               " bytes, not a multiple of 32 (the NPU silently rounds down to ", bytes / 32 * 32,
                               "); use DataCopyPad"));
  }
}

// `datacopy-range`: a field of a copy's parameter struct outside the range the API documents for A2
// (the rest of each field's range is its type's: uint16_t blockLen / gaps of DataCopyParams,
// uint32_t strides of DataCopyExtParams). Sources: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/
// 数据搬运/GM与UB数据搬运/: GM与UB高维切分数据搬运(DataCopy).md (表4), GMToUB非对齐数据搬运(DataCopyPad).md
// (表5, 约束说明), UBToGM非对齐数据搬运(DataCopyPad).md.
inline void check_field(const char* api, const char* field, uint64_t v, uint64_t max, const char* why) {
  if (v > max) fail("datacopy-range", str(api, ": ", field, " = ", v, " outside [0, ", max, "] (", why, ")"));
}

// DataCopyParams: blockCount <= 4095 (the 12-bit count of the MTE instruction).
inline void check_copy_params(const char* api, uint16_t blockCount) {
  check_field(api, "DataCopyParams.blockCount", blockCount, 4095, "the A2 limit per copy: the count wraps");
}

// DataCopyExtParams: blockCount <= 4095, blockLen <= 2 097 151 bytes and a multiple of the element
// size (`datacopy-align`).
inline void check_ext_params(const char* api, uint16_t blockCount, uint32_t blockLen, uint64_t elem, const char* type) {
  check_field(api, "DataCopyExtParams.blockCount", blockCount, 4095, "the A2 limit per copy: the count wraps");
  check_field(api, "DataCopyExtParams.blockLen", blockLen, 2097151, "the A2 limit per block, in bytes");
  if (blockLen % elem != 0) {
    fail("datacopy-align", str(api, ": DataCopyExtParams.blockLen ", blockLen, " bytes is not a multiple of sizeof(",
                               type, ")"));
  }
}

// DataCopyPadExtParams: leftPadding and rightPadding (elements) take at most 32 bytes each.
inline void check_pad_params(const char* api, uint8_t left, uint8_t right, uint64_t elem) {
  check_field(api, "DataCopyPadExtParams.leftPadding", left, 32 / elem, "at most 32 bytes of padding on each side");
  check_field(api, "DataCopyPadExtParams.rightPadding", right, 32 / elem, "at most 32 bytes of padding on each side");
}

}  // namespace twin
