#pragma once
// Permutations the AVX-512 rows are compiled for (the "fixed" rows): rotate_half within each
// section of the D = 128 splits that 2D and 3D RoPE use. A plan whose partner columns equal one of
// them (signs are folded into sin, so any signs) takes rows whose permutes, source registers and
// index vectors are constants: at most three register operations per 16 partners, where the rows
// for any permutation read the plan at run time and take up to four permutes and four blends (bf16
// x: the rows of its pair plan, two word permutes and a blend per 32 words, then a split of each).
// Any other permutation keeps the general rows.
#include <cstdint>
#include <vector>

namespace npu_ops_transformer_ext {
namespace cpu {

constexpr int64_t kFixedPermD = 128;

// Section lengths of one split (0: no further section); each section has an even length and is
// rotated by half of it.
struct HalfSplit {
  int32_t len[3];
};

// The seed's 3D split, Wan's, HunyuanVideo's / FLUX's / Qwen-Image's, and 2D 64 + 64.
constexpr HalfSplit kFixedSplits[] = {{{44, 44, 40}}, {{44, 42, 42}}, {{16, 56, 56}}, {{64, 64, 0}}};
constexpr int kNumFixedPerms = static_cast<int>(sizeof(kFixedSplits) / sizeof(kFixedSplits[0]));

// The column whose value column j of fixed permutation k takes (x @ y)[j] = +-x[partner].
constexpr int32_t fixed_partner(int k, int32_t j) {
  int32_t begin = 0;
  for (int s = 0; s < 3; ++s) {
    const int32_t len = kFixedSplits[k].len[s];
    if (j < begin + len) {
      const int32_t half = len / 2;
      return j < begin + half ? j + half : j - half;
    }
    begin += len;
  }
  return -1;
}

// The fixed permutation with these partner columns, or -1.
inline int32_t find_fixed_perm(const std::vector<int32_t>& partner) {
  if (static_cast<int64_t>(partner.size()) != kFixedPermD) return -1;
  for (int k = 0; k < kNumFixedPerms; ++k) {
    bool same = true;
    for (int32_t j = 0; j < kFixedPermD && same; ++j) same = partner[j] == fixed_partner(k, j);
    if (same) return k;
  }
  return -1;
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
