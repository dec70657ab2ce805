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

// `datacopy-range`: DataCopyPad moves at most 4095 blocks per instruction on A2 (a 12-bit field).
inline void check_block_count(const char* api, uint32_t blockCount) {
  if (blockCount > 4095) fail("datacopy-range", str(api, ": blockCount ", blockCount, " > 4095 (the A2 limit per copy)"));
}

// `datacopy-align` / `datacopy-range` on DataCopyExtParams::blockLen (bytes): a multiple of the
// element size, at most 2 097 151.
inline void check_ext_block_len(uint32_t blockLen, uint64_t elem, const char* type) {
  if (blockLen % elem != 0) {
    fail("datacopy-align", str("DataCopyPad blockLen ", blockLen, " bytes is not a multiple of sizeof(", type, ")"));
  }
  if (blockLen > 2097151u) fail("datacopy-range", str("DataCopyPad blockLen ", blockLen, " > 2097151"));
}

}  // namespace twin
