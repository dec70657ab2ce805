// Host side of the vector-only kernel for signed (partial) permutations: finding the permutation,
// the tiling (pure, unit-tested), the packed tiling bytes, and the kernel choice.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "op_host/rope_matrix_tiling.h"

namespace rope_matrix {

namespace {
template <typename... A>
[[noreturn]] void fail(const A&... a) {
  std::ostringstream os;
  os << "rope_matrix perm tiling: ";
  (os << ... << a);
  throw TilingError(os.str());
}
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
constexpr uint64_t kConstAlign = 32;  // the offsets/sign table starts 32-byte aligned in GM
constexpr uint32_t kZeroSlotElems = 8;  // fp32 zeros after the x tile (the kernel's +0 slot)
// Columns 2i, 2i+1 take the partners 2k, 2k+1 (one 32-bit word of a 2-byte x), for every i; an
// all-zero column has no partner word.
bool moves_in_word_pairs(const std::vector<int32_t>& partner) {
  if (partner.size() % 2 != 0) return false;
  for (uint64_t j = 0; j < partner.size(); j += 2) {
    if (partner[j] < 0 || partner[j] % 2 != 0 || partner[j + 1] != partner[j] + 1) return false;
  }
  return true;
}
}  // namespace

bool find_signed_permutation(const double* y, uint64_t d, std::vector<int32_t>& partner, std::vector<float>& sign) {
  partner.assign(d, -1);
  sign.assign(d, 1.0f);
  std::vector<bool> rowUsed(d, false);
  for (uint64_t j = 0; j < d; ++j) {
    for (uint64_t i = 0; i < d; ++i) {
      const double v = y[i * d + j];
      if (v == 0.0) continue;  // +0 and -0 (a -0 entry adds nothing to an exact move)
      if ((v != 1.0 && v != -1.0) || partner[j] >= 0 || rowUsed[i]) return false;
      partner[j] = static_cast<int32_t>(i);
      sign[j] = static_cast<float>(v);
      rowUsed[i] = true;
    }
  }
  return true;
}

uint32_t perm_ub_bytes_per_element(uint32_t xBytes, uint32_t tableBytes) {
  const uint32_t queues = 2 * xBytes /*x*/ + 2 * xBytes /*out*/ + 2 * 2 * tableBytes /*cos, sin*/;
  const uint32_t temps = 4 /*x fp32*/ + 4 /*partner fp32*/ + 4 /*offsets*/ + 4 /*signs*/ +
                         (tableBytes == 4 ? 0 : 8) /*cos, sin fp32*/;
  return queues + temps;
}

RopePermTiling compute_perm_tiling(const Problem& p, const Platform& plat, uint32_t maxBlockDim) {
  const uint32_t xb = p.xType == DType::FP32 ? 4 : 2;
  if (p.xBytes != xb) fail("xBytes = ", p.xBytes, " does not match the x dtype (", xb, " bytes)");
  if (p.tableBytes != xb && p.tableBytes != 4) fail("table element size ", p.tableBytes, " must be ", xb, " or 4");
  if (p.d < kMinD) fail("D = ", p.d, " is below the minimum ", kMinD);
  if (p.s == 0 || p.outer == 0 || p.inner == 0) {
    fail("empty problem (outer = ", p.outer, ", S = ", p.s, ", inner = ", p.inner, "): the launcher must not launch it");
  }
  if (plat.aivNum == 0) fail("platform without vector cores");
  if (plat.ubBytes <= kAscReservedUb) fail("UB of ", plat.ubBytes, " bytes is smaller than the reserve ", kAscReservedUb);

  RopePermTiling t;
  std::memset(&t, 0, sizeof(t));
  t.d = static_cast<uint32_t>(p.d);
  t.xBytes = p.xBytes;
  t.tableBytes = p.tableBytes;
  const uint32_t align = 32 / std::min(p.xBytes, p.tableBytes);
  t.dPad = static_cast<uint32_t>(ceil_div(p.d, align) * align);
  t.ubBudget = static_cast<uint32_t>(plat.ubBytes - kAscReservedUb);
  const uint64_t perRow = static_cast<uint64_t>(perm_ub_bytes_per_element(p.xBytes, p.tableBytes)) * t.dPad;
  const uint64_t fixed = kZeroSlotElems * 4;
  const uint64_t maxChunk = t.ubBudget > fixed ? (t.ubBudget - fixed) / perRow : 0;
  if (maxChunk == 0) {
    fail("D = ", p.d, " (row pitch ", t.dPad, ") needs ", perRow + fixed, " UB bytes for one row, more than the UB budget of ",
         t.ubBudget, " bytes");
  }
  if (p.d * p.xBytes > 2097151ull) fail("row of ", p.d * p.xBytes, " bytes exceeds DataCopyPad's 2097151-byte block");
  const uint64_t gap = (p.inner - 1) * p.d * p.xBytes;
  if (gap > UINT32_MAX) fail("x row gap of ", gap, " bytes (inner = ", p.inner, ") exceeds DataCopyPad's 32-bit stride");

  uint64_t cores = plat.aivNum;
  if (maxBlockDim) cores = std::min<uint64_t>(cores, maxBlockDim);
  const CoreSplit split = split_cores(cores, p.s, p.outer, p.s);  // S rows and outer heads, balanced
  const uint64_t sCores = split.sCores, oGroups = split.oGroups;
  t.sCores = static_cast<uint32_t>(sCores);
  t.oGroups = static_cast<uint32_t>(oGroups);
  t.blockDim = static_cast<uint32_t>(sCores * oGroups);
  t.outer = p.outer;
  t.s = p.s;
  t.inner = p.inner;
  t.sBase = p.s / sCores;
  t.sRem = p.s % sCores;
  t.oBase = p.outer / oGroups;
  t.oRem = p.outer % oGroups;
  const uint64_t coreRows = t.sBase + (t.sRem ? 1 : 0);
  const uint64_t chunk = std::min<uint64_t>({maxChunk, coreRows, kMaxBlockCount});
  t.chunkRows = static_cast<uint32_t>(chunk);
  t.ubBytes = static_cast<uint32_t>(perRow * chunk + fixed);
  // 2 * tile * 4 bytes of constants in one DataCopyPad block.
  if (2ull * chunk * t.dPad * 4 > 2097151ull) fail("offset table of ", 2ull * chunk * t.dPad * 4, " bytes exceeds one copy");
  t.constOffset = ceil_div(sizeof(RopePermTiling), kConstAlign) * kConstAlign;
  return t;
}

std::vector<uint32_t> partner_runs(const std::vector<int32_t>& partner) {
  std::vector<uint32_t> words(kPermRunWords, 0);
  const uint64_t d = partner.size();
  uint32_t count = 0;
  for (uint64_t j = 0; j < d;) {
    if (partner[j] < 0) return std::vector<uint32_t>(kPermRunWords, 0);  // a +0 column: Gather
    const int64_t shift = partner[j] - static_cast<int64_t>(j);
    uint64_t end = j + 1;
    while (end < d && partner[end] - static_cast<int64_t>(end) == shift) ++end;
    const uint64_t src = j + shift, len = end - j;
    if (j % 8 || src % 8 || len % 8 || count == kMaxPermRuns) return std::vector<uint32_t>(kPermRunWords, 0);
    words[1 + 3 * count] = static_cast<uint32_t>(j);
    words[2 + 3 * count] = static_cast<uint32_t>(src);
    words[3 + 3 * count] = static_cast<uint32_t>(len);
    ++count;
    j = end;
  }
  words[0] = count;
  return words;
}

uint32_t perm_partner_path(const std::vector<int32_t>& partner, uint32_t xBytes) {
  return perm_partner_path(partner, xBytes, partner_runs(partner));
}

uint32_t perm_partner_path(const std::vector<int32_t>& partner, uint32_t xBytes, const std::vector<uint32_t>& runs) {
  if (runs[0] > 0) return kPermPathRuns;
  if (xBytes != 2 || partner.size() % 2 != 0) return kPermPathGather;
  bool swap = true;
  for (uint64_t j = 0; swap && j < partner.size(); ++j) swap = partner[j] == static_cast<int32_t>(j ^ 1);
  return swap ? kPermPathSwapHalves : moves_in_word_pairs(partner) ? kPermPathGatherWords : kPermPathGather;
}

std::vector<uint8_t> pack_perm_tiling(const RopePermTiling& t, const std::vector<int32_t>& partner,
                                      const std::vector<float>& sign, const std::vector<uint32_t>& runs) {
  if (partner.size() != t.d || sign.size() != t.d) fail("partner/sign size does not match D = ", t.d);
  if (runs.size() != kPermRunWords) fail("partner runs of ", runs.size(), " words, expected ", kPermRunWords);
  const uint64_t tile = static_cast<uint64_t>(t.chunkRows) * t.dPad;
  std::vector<uint8_t> out(t.constOffset + 2 * tile * 4 + kPermRunWords * 4, 0);
  std::memcpy(out.data(), &t, sizeof(t));
  std::vector<uint32_t> offsets(tile, 0);
  std::vector<float> signs(tile, 1.0f);
  const uint32_t zeroSlot = static_cast<uint32_t>(tile * 4);  // bytes: the +0 slot after the tile
  const bool words = t.partnerPath == kPermPathGatherWords;
  if (words && (t.xBytes != 2 || t.dPad % 2 || !moves_in_word_pairs(partner))) {
    fail("the word Gather needs a 2-byte x whose columns move in pairs (2i, 2i+1) <- (2k, 2k+1)");
  }
  for (uint64_t r = 0; r < t.chunkRows; ++r) {
    for (uint64_t j = 0; j < t.dPad; ++j) {
      const uint64_t e = r * t.dPad + j;
      const int32_t src = j < t.d ? partner[j] : -1;
      if (j < t.d) signs[e] = sign[j];
      if (!words) {
        offsets[e] = src < 0 ? zeroSlot : static_cast<uint32_t>((r * t.dPad + static_cast<uint64_t>(src)) * 4);
      } else if (j % 2 == 0) {
        // word e/2 of the 2-byte x tile: the word of its partner pair; a padding word reads its
        // row's first word (loaded, and never stored)
        const uint64_t col = j < t.d ? static_cast<uint64_t>(src) : 0;
        offsets[e / 2] = static_cast<uint32_t>((r * t.dPad + col) * 2);
      }
    }
  }
  std::memcpy(out.data() + t.constOffset, offsets.data(), tile * 4);
  std::memcpy(out.data() + t.constOffset + tile * 4, signs.data(), tile * 4);
  std::memcpy(out.data() + t.constOffset + 2 * tile * 4, runs.data(), runs.size() * 4);
  return out;
}

NpuKernel choose_kernel(const std::string& requested, bool isPerm, bool permServed, const std::string& permWhyNot) {
  if (requested == "mix") return NpuKernel::MIX;
  if (requested == "auto") return isPerm && permServed ? NpuKernel::PERM : NpuKernel::MIX;
  if (requested == "perm") {
    if (!isPerm) {
      throw TilingError("the vector-only kernel (perm) needs mat to be a signed (partial) permutation: every column "
                        "at most one non-zero, +1 or -1, each row used once; use kernel 'auto' or 'mix' for this mat");
    }
    if (!permServed) throw TilingError(permWhyNot + "; use kernel 'auto' or 'mix' for this shape");
    return NpuKernel::PERM;
  }
  throw TilingError("unknown NPU kernel '" + requested + "': valid values are auto, mix, perm");
}

}  // namespace rope_matrix
