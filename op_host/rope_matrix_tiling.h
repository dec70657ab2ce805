// Host tiling for rope_matrix: pure functions over plain structs (no ACL, no torch), so that tests
// can check every field and the twin runs exactly what the NPU launcher runs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "inc/rope_matrix_tiling.h"

namespace platform_ascendc {
class PlatformAscendC;  // CANN's tiling/platform/platform_ascendc.h (or the twin's)
}

namespace rope_matrix {

// What the launcher knows about the device (from PlatformAscendC on NPU, from the SoC table in the twin).
struct Platform {
  uint32_t aicNum = 0;       // cube cores (GetCoreNumAic)
  uint32_t aivNum = 0;       // vector cores (GetCoreNumAiv)
  uint64_t ubBytes = 0;      // GetCoreMemSize(UB): UB minus the 256-byte framework reserve
};

// The 8 KiB at the top of UB that some Ascend C APIs reserve unless the kernel is built with
// --cce-disable-asc-reserved-ubuf.
constexpr uint64_t kAscReservedUb = 8192;
constexpr uint32_t kMinD = 16;              // smallest head dim served (one 32-byte bf16 row)
constexpr uint32_t kMaxBlockCount = 4095;   // DataCopyPad blockCount limit (rows per copy)
constexpr uint64_t kSysWorkspace = 16ull << 20;  // system workspace of the library (arch 2201)

// The problem in the [outer, S, inner, D] view of inc/rope_matrix_tiling.h.
enum class DType { BF16, FP16, FP32 };

struct Problem {
  uint64_t outer = 1, s = 1, inner = 1, d = 0;
  DType xType = DType::BF16;  // x, y, out and workspace element type
  uint32_t xBytes = 2;      // 2 (bf16, fp16) or 4 (fp32)
  uint32_t tableBytes = 2;  // xBytes or 4
};

// Thrown when no tiling can serve the problem; the message carries the numbers.
struct TilingError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Looks a SoC name up ("Ascend910B1".."Ascend910B4"); throws TilingError for an unknown name.
Platform platform_for_soc(const std::string& soc);

// UB bytes per element of the dPad-wide row pitch the vector side allocates (double-buffered
// x, x@y, out and tables, two fp32 temporaries, fp32 tables unless they already are fp32).
uint32_t ub_bytes_per_element(uint32_t xBytes, uint32_t tableBytes);

// The tiling; `maxBlockDim` (0 = all) caps the AI Cores used. Throws TilingError.
RopeMatrixTiling compute_tiling(const Problem& p, const Platform& plat, uint32_t maxBlockDim = 0);

// Matmul tiling (CANN's MultiCoreMatmulTiling on `plat`, or the twin's equivalent) for the per-step
// product [2*chunkRows*inner, D] @ [D, D] of x's type `xType`, written as the kernel's TCubeTiling
// bytes. Throws TilingError.
std::vector<uint8_t> compute_matmul_tiling(const RopeMatrixTiling& t, DType xType,
                                           const platform_ascendc::PlatformAscendC& plat);

// The bytes the kernel's `tiling` argument points to: RopeMatrixTiling, then TCubeTiling.
std::vector<uint8_t> pack_tiling(const RopeMatrixTiling& t, const std::vector<uint8_t>& cube);

// Workspace bytes to allocate: system workspace + user workspace.
inline uint64_t workspace_bytes(const RopeMatrixTiling& t) { return kSysWorkspace + t.userWorkspace; }

}  // namespace rope_matrix
