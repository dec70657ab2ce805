#include "cpu_kernel/rotate_plan.h"

#include "cpu_kernel/fixed_perms.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

// Finds (partner, sign) per column; false as soon as y is not a signed (partial) permutation.
bool find_signed_permutation(const double* y, int64_t D, std::vector<int32_t>& partner,
                             std::vector<int8_t>& sign) {
  partner.assign(D, -1);
  sign.assign(D, 1);
  std::vector<uint8_t> row_used(D, 0);
  for (int64_t i = 0; i < D; ++i) {
    for (int64_t j = 0; j < D; ++j) {
      const double v = y[i * D + j];
      if (v == 0.0) continue;
      if ((v != 1.0 && v != -1.0) || partner[j] >= 0 || row_used[i]) return false;
      partner[j] = static_cast<int32_t>(i);
      sign[j] = v > 0 ? 1 : -1;
      row_used[i] = 1;
    }
  }
  return true;
}

ChunkPlan plan_chunk(const std::vector<int32_t>& partner, int64_t D, int64_t c) {
  ChunkPlan p{};
  const int64_t j0 = c * kLanes;
  const int64_t n = std::min<int64_t>(kLanes, D - j0);
  for (int64_t l = 0; l < n; ++l) {
    if (partner[j0 + l] >= 0) p.nonzero_mask |= 1u << l;
  }
  for (int64_t l = 0; l < n; ++l) {
    const int32_t s = partner[j0 + l];
    if (s < 0 || s >= 2 * kLanes * 4) continue;  // no partner, or beyond a row of kRowChunks chunks
    p.row_idx[l] = s;
    p.row_part[s / (2 * kLanes)] |= 1u << l;
  }
  // Offset: every live lane l reads partner[j0] + l.
  bool offset = p.nonzero_mask == ((n == kLanes) ? 0xFFFFu : ((1u << n) - 1));
  for (int64_t l = 0; offset && l < n; ++l) {
    offset = partner[j0 + l] == partner[j0] + l;
  }
  if (offset) {
    p.kind = static_cast<int32_t>(ChunkKind::kOffset);
    p.start = partner[j0];
    return p;
  }
  // Permute: the partners of the live lanes lie in at most two aligned 16-float vectors.
  int32_t va = -1, vb = -1;
  bool two = true;
  for (int64_t l = 0; l < n && two; ++l) {
    if (partner[j0 + l] < 0) continue;
    const int32_t v = partner[j0 + l] / kLanes;
    if (va < 0 || v == va) {
      va = v;
    } else if (vb < 0 || v == vb) {
      vb = v;
    } else {
      two = false;
    }
  }
  if (va < 0) va = 0;
  if (vb < 0) vb = va;
  // Runs of consecutive partners (lane l + 1 reads the element after lane l's).
  int32_t src[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) src[l] = l < n ? partner[j0 + l] : -1;
  int32_t seg_base[kMaxSegments] = {};
  uint32_t seg_mask[kMaxSegments] = {};
  const int nseg = split_runs(src, static_cast<int>(kLanes), seg_base, seg_mask);
  // Cost in vector instructions (a source vector other than the chunk's own costs a load and a
  // conversion; a run costs a masked load, plus one conversion for them all).
  const int32_t own = static_cast<int32_t>(c);
  const int permute_cost = two ? 1 + 2 * (va != own) + 2 * (vb != own && vb != va) : 1 << 20;
  const int segment_cost = nseg <= kMaxSegments ? nseg + 1 : 1 << 20;
  if (segment_cost < permute_cost) {
    p.kind = static_cast<int32_t>(ChunkKind::kSegments);
    p.nseg = nseg;
    for (int32_t k = 0; k < nseg; ++k) {
      p.seg_base[k] = seg_base[k];
      p.seg_mask[k] = seg_mask[k];
    }
    return p;
  }
  if (two) {
    p.kind = static_cast<int32_t>(ChunkKind::kPermute);
    p.a = va;
    p.b = vb;
    for (int64_t l = 0; l < n; ++l) {
      const int32_t s = partner[j0 + l];
      if (s < 0) continue;
      p.idx[l] = (s / kLanes == va) ? (s % kLanes) : (kLanes + s % kLanes);
    }
    return p;
  }
  p.kind = static_cast<int32_t>(ChunkKind::kGather);
  for (int64_t l = 0; l < n; ++l) p.idx[l] = std::max(partner[j0 + l], 0);
  return p;
}

// Whether the chunks are the half rotation (RotatePlan::chunks_half_rotation).
bool is_half_rotation(const std::vector<ChunkPlan>& chunks) {
  const size_t nc = chunks.size();
  bool half = nc % 2 == 0;
  for (size_t c = 0; c < nc && half; ++c) {
    half = chunks[c].kind == static_cast<int32_t>(ChunkKind::kOffset) && chunks[c].nonzero_mask == 0xFFFFu &&
           chunks[c].start == static_cast<int32_t>(((c + nc / 2) % nc) * kLanes);
  }
  return half;
}

}  // namespace

int split_runs(const int32_t* src, int n, int32_t base[kMaxSegments], uint32_t mask[kMaxSegments]) {
  int nseg = 0;
  for (int l = 0; l < n; ++l) {
    if (src[l] < 0) continue;
    if (nseg == 0 || src[l - 1] < 0 || src[l] != src[l - 1] + 1) {
      if (nseg == kMaxSegments) return kMaxSegments + 1;
      base[nseg] = src[l] - l;
      mask[nseg] = 0;
      ++nseg;
    }
    mask[nseg - 1] |= 1u << l;
  }
  return nseg;
}

RotatePlan make_rotate_plan(const at::Tensor& y) {
  RotatePlan plan;
  const int64_t D = y.size(0);
  plan.D = D;
  plan.Dp = (D + kLanes - 1) / kLanes * kLanes;
  const at::Tensor y64 = y.to(at::kDouble).contiguous();
  const double* yp = y64.data_ptr<double>();
  plan.is_perm = find_signed_permutation(yp, D, plan.partner, plan.sign);
  if (plan.is_perm) {
    plan.sign_bits.assign(plan.Dp, 0u);
    for (int64_t j = 0; j < D; ++j) plan.sign_bits[j] = plan.sign[j] < 0 ? 0x80000000u : 0u;
    plan.sign16.assign(plan.Dp, 0);
    for (int64_t j = 0; j < D; ++j) plan.sign16[j] = plan.sign[j] < 0 ? 0x8000u : 0u;
    for (int64_t c = 0; c < plan.Dp / kLanes; ++c) plan.chunks.push_back(plan_chunk(plan.partner, D, c));
    plan.chunks_half_rotation = is_half_rotation(plan.chunks);
    plan.pair_groups = plan_pair_groups(plan.partner, D);
    plan.pair_shape = pair_shape(plan.pair_groups);
    plan.fixed_perm = find_fixed_perm(plan.partner);
    plan.pair_swap = D % 2 == 0;
    for (int64_t j = 0; j < D; ++j) {
      const int32_t p = plan.partner[j];
      plan.pair_swap = plan.pair_swap && p == static_cast<int32_t>(j ^ 1);
      auto& runs = plan.runs;
      const bool extends = !runs.empty() && runs.back().end == j &&
                           ((p < 0 && runs.back().src < 0) ||
                            (p >= 0 && runs.back().src >= 0 && runs.back().src + (j - runs.back().begin) == p));
      if (extends) {
        runs.back().end = static_cast<int32_t>(j + 1);
      } else {
        runs.push_back({static_cast<int32_t>(j), static_cast<int32_t>(j + 1), p < 0 ? -1 : p});
      }
    }
    return plan;
  }
  plan.y64.assign(D * plan.Dp, 0.0);
  plan.y32.assign(D * plan.Dp, 0.0f);
  for (int64_t i = 0; i < D; ++i) {
    for (int64_t j = 0; j < D; ++j) {
      plan.y64[i * plan.Dp + j] = yp[i * D + j];
      plan.y32[i * plan.Dp + j] = static_cast<float>(yp[i * D + j]);
    }
  }
  // The AVX512_BF16 GEMM: y exact in bf16 and no entry subnormal (vdpbf16ps reads those as zero).
  // Exponent fields of the nonzero entries (fp32 and bf16 share them) bound the x elements it
  // computes exactly (dp_lo_bits, dp_hi_bits; see rotate_plan.h): |x * y| >= 2^(ex + ey - 254) must
  // be >= 2^-102, and D * |x| * |y| < D * 2^(ex + ey - 252) at most 2^127.
  bool bf16_exact = D % 2 == 0;
  int ey_min = 255, ey_max = 0;
  for (int64_t k = 0; k < D * D && bf16_exact; ++k) {
    bf16_exact = static_cast<double>(static_cast<float>(c10::BFloat16(static_cast<float>(yp[k])))) == yp[k];
    if (yp[k] != 0.0) {
      uint32_t bits;
      const float f = static_cast<float>(yp[k]);
      std::memcpy(&bits, &f, sizeof(bits));
      const int e = static_cast<int>((bits >> 23) & 0xFF);
      ey_min = std::min(ey_min, e);
      ey_max = std::max(ey_max, e);
    }
  }
  int log2_d = 0;
  while ((int64_t{1} << log2_d) < D) ++log2_d;
  const int lo_exp = std::max(1, 152 - ey_min), hi_exp = std::min(254, 379 - ey_max - log2_d);
  // A subnormal, infinite or NaN entry, or no x exponent that is safe: the fp32 GEMM.
  bf16_exact = bf16_exact && ey_min >= 1 && ey_max <= 254 && lo_exp <= hi_exp;
  if (bf16_exact) {
    plan.dp_lo_bits = static_cast<uint16_t>(lo_exp << 7);
    plan.dp_hi_bits = static_cast<uint16_t>((hi_exp << 7) | 0x7F);
    plan.y_bf16_pairs.assign(D * plan.Dp, c10::BFloat16(0.0f));
    for (int64_t i2 = 0; i2 < D / 2; ++i2) {
      for (int64_t j = 0; j < D; ++j) {
        plan.y_bf16_pairs[(i2 * plan.Dp + j) * 2] = c10::BFloat16(static_cast<float>(yp[(2 * i2) * D + j]));
        plan.y_bf16_pairs[(i2 * plan.Dp + j) * 2 + 1] = c10::BFloat16(static_cast<float>(yp[(2 * i2 + 1) * D + j]));
      }
    }
  }
  return plan;
}

namespace {

// Matrices larger than this (D > 512 in fp32) are compiled every call, not cached.
constexpr size_t kMaxCachedBytes = size_t(1) << 20;

// A compiled matrix with its key: dtype, D and a copy of its bytes.
struct Entry {
  at::ScalarType dtype = at::kFloat;
  int64_t D = 0;
  std::vector<uint8_t> bytes;
  std::shared_ptr<const RotatePlan> plan;

  bool matches(const at::Tensor& y, const uint8_t* data, size_t nbytes) const {
    return plan != nullptr && dtype == y.scalar_type() && D == y.size(0) && bytes.size() == nbytes &&
           std::memcmp(bytes.data(), data, nbytes) == 0;
  }
};

// The shared cache (y contiguous, at most kMaxCachedBytes): a hit moves to the front, a miss is
// compiled outside the lock and inserted at the front. `y` is the caller's snapshot of the matrix
// (its bytes `snap`), so an entry's key and plan come from the same contents.
std::shared_ptr<const RotatePlan> cached_by_contents(const at::Tensor& y, const std::vector<uint8_t>& snap) {
  constexpr size_t kEntries = 8;
  static std::mutex mu;
  static std::vector<Entry> cache;  // most recently used first
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < cache.size(); ++i) {
      if (cache[i].matches(y, snap.data(), snap.size())) {
        std::rotate(cache.begin(), cache.begin() + i, cache.begin() + i + 1);
        return cache.front().plan;
      }
    }
  }
  auto plan = std::make_shared<const RotatePlan>(make_rotate_plan(y));
  std::lock_guard<std::mutex> lock(mu);
  cache.insert(cache.begin(), Entry{y.scalar_type(), y.size(0), snap, plan});
  if (cache.size() > kEntries) cache.pop_back();
  return plan;
}

}  // namespace

std::shared_ptr<const RotatePlan> cached_rotate_plan(const at::Tensor& y_in) {
  // Each thread first compares y with the last matrix it used, without the shared cache's lock: a
  // model passes the same matrix every call. Always by contents: neither the tensor's identity nor
  // its version counter sees a write through `.data` (which gradcheck itself makes) or through
  // memory shared with NumPy.
  thread_local Entry last;
  const at::Tensor y = y_in.contiguous();
  const size_t nbytes = y.numel() * y.element_size();
  if (nbytes > kMaxCachedBytes) return std::make_shared<const RotatePlan>(make_rotate_plan(y));
  const auto* data = static_cast<const uint8_t*>(y.const_data_ptr());
  if (last.matches(y, data, nbytes)) return last.plan;
  // On a miss the key and the plan are made from one copy of y's bytes: were they read from y
  // apart, a write to mat during the call (the caller's data race) could store a key with the plan
  // of other contents, and later calls with that key, race-free ones in any thread, would use it.
  std::vector<uint8_t> snap(data, data + nbytes);
  const at::Tensor ys = at::from_blob(snap.data(), y.sizes(), at::TensorOptions().dtype(y.scalar_type()));
  std::shared_ptr<const RotatePlan> plan = cached_by_contents(ys, snap);
  last.dtype = y.scalar_type();
  last.D = y.size(0);
  last.bytes = std::move(snap);
  last.plan = plan;
  return plan;
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
