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
constexpr uint64_t kMinStepRows = 512;      // S rows per head the cube multiplies per step, when they fit
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

// How `cores` cores split between the S rows (sCores <= maxSCores) and the outer heads (oGroups),
// pure: of every sCores with oGroups = min(outer, cores / sCores), the pair whose busiest core has
// the least work, counted as rows * (heads + 1) (one x row per head, plus the row's cos/sin, loaded
// once for all of its heads), ties going to more S-cores. The S-first split of a long S (sCores =
// min(cores, maxSCores)) is the same as before whenever nothing does better.
struct CoreSplit {
  uint64_t sCores, oGroups;
};
CoreSplit split_cores(uint64_t cores, uint64_t s, uint64_t outer, uint64_t maxSCores);

// Looks a SoC name up ("Ascend910B1".."Ascend910B4"); throws TilingError for an unknown name.
Platform platform_for_soc(const std::string& soc);

// UB bytes per element of the dPad-wide row pitch the vector side allocates (double-buffered
// x, x@y, out and tables, two fp32 temporaries, fp32 tables unless they already are fp32).
uint32_t ub_bytes_per_element(uint32_t xBytes, uint32_t tableBytes);

// The tiling; `maxBlockDim` (0 = all) caps the AI Cores used; `slotBytes` (tests only: smaller
// slots exercise the head groups on small shapes) caps a workspace slot. Throws TilingError.
RopeMatrixTiling compute_tiling(const Problem& p, const Platform& plat, uint32_t maxBlockDim = 0,
                                uint64_t slotBytes = kSlotBytes);

// Matmul tiling (CANN's MultiCoreMatmulTiling on `plat`, or the twin's equivalent) for the per-step
// product [stepRows*innerChunk, D] @ [D, D] of x's type `xType`, written as the kernel's TCubeTiling
// bytes. Throws TilingError.
std::vector<uint8_t> compute_matmul_tiling(const RopeMatrixTiling& t, DType xType,
                                           const platform_ascendc::PlatformAscendC& plat);

// The bytes the kernel's `tiling` argument points to: RopeMatrixTiling, then TCubeTiling.
std::vector<uint8_t> pack_tiling(const RopeMatrixTiling& t, const std::vector<uint8_t>& cube);

// ---- the vector-only kernel for signed (partial) permutations ----

// (partner, sign) per output column of y ([D, D] row-major, any float values): true when every
// column holds at most one non-zero, +1 or -1, in a row used by no other column; then
// (x @ y)[j] = sign[j] * x[partner[j]], partner[j] = -1 (and sign +1) for an all-zero column.
bool find_signed_permutation(const double* y, uint64_t d, std::vector<int32_t>& partner, std::vector<float>& sign);

// UB bytes per element of the dPad-wide row pitch the perm kernel allocates (double-buffered x,
// out and tables, fp32 x and partner rows, Gather offsets and signs, fp32 tables unless they are).
uint32_t perm_ub_bytes_per_element(uint32_t xBytes, uint32_t tableBytes);

// The perm tiling: pure, unit-tested. `maxBlockDim` (0 = all) caps the vector cores used. Throws
// TilingError when the shape is not served (the launcher then uses the MIX kernel).
RopePermTiling compute_perm_tiling(const Problem& p, const Platform& plat, uint32_t maxBlockDim = 0);

// The partner-run words of inc/rope_matrix_tiling.h (kPermRunWords uint32) for a partner table;
// count 0 when some column is all zero, a run is not 8-column aligned or there are too many.
std::vector<uint32_t> partner_runs(const std::vector<int32_t>& partner);

// How the perm kernel finds the partners (a PermPartnerPath of inc/rope_matrix_tiling.h), pure:
// the partner runs' copies when partner_runs finds them, the 16-bit half swap when x has 2-byte
// elements and every column's partner is its pair (2i <-> 2i+1), the word Gather when x has 2-byte
// elements and every pair of columns (2i, 2i+1) takes a pair (2k, 2k+1), else the Gather.
uint32_t perm_partner_path(const std::vector<int32_t>& partner, uint32_t xBytes);
// The same, given partner_runs(partner).
uint32_t perm_partner_path(const std::vector<int32_t>& partner, uint32_t xBytes, const std::vector<uint32_t>& runs);

// The perm kernel's `tiling` bytes: RopePermTiling, padding to constOffset, then per tile element
// the Gather byte offset into the fp32 x tile (an all-zero column and the padding columns read the
// +0 slot after the tile; on t.partnerPath == kPermPathGatherWords the first half holds one byte
// offset into the 2-byte x tile per 32-bit word, the rest is 0) and the sign, then the partner runs
// (`runs`: partner_runs(partner)).
std::vector<uint8_t> pack_perm_tiling(const RopePermTiling& t, const std::vector<int32_t>& partner,
                                      const std::vector<float>& sign, const std::vector<uint32_t>& runs);

// Which kernel serves a call: `requested` is "auto", "mix" or "perm" (anything else throws
// TilingError listing them). "perm" needs a signed permutation and a perm tiling (else it throws
// with the reason); "auto" takes perm whenever both hold.
enum class NpuKernel { MIX, PERM };
NpuKernel choose_kernel(const std::string& requested, bool isPerm, bool permServed, const std::string& permWhyNot);

// Workspace bytes to allocate: system workspace + user workspace (at most kSysWorkspace +
// blockDim * kSlots * kSlotBytes, whatever the shape).
inline uint64_t workspace_bytes(const RopeMatrixTiling& t) { return kSysWorkspace + t.userWorkspace; }

}  // namespace rope_matrix
