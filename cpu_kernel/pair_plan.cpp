// The pair form of a signed permutation (PairGroupPlan in rotate_plan.h).
#include <algorithm>

#include "cpu_kernel/rotate_plan.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

constexpr int64_t kGroup = 2 * kLanes;  // elements per pair group

// Source groups of the live lanes, in order of first use (at most `limit`); false if more.
bool source_groups(const int32_t* src, uint32_t live, int limit, std::vector<int32_t>& groups) {
  groups.clear();
  for (int l = 0; l < kLanes; ++l) {
    if (!(live >> l & 1u)) continue;
    const int32_t g = src[l] / kLanes;
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) {
      if (static_cast<int>(groups.size()) == limit) return false;
      groups.push_back(g);
    }
  }
  return true;
}

// Index into (group a | group b) of source pair s.
int32_t lane_of(int32_t s, int32_t a) { return (s / kLanes == a ? 0 : kLanes) + s % kLanes; }

}  // namespace

std::vector<PairGroupPlan> plan_pair_groups(const std::vector<int32_t>& partner, int64_t D) {
  std::vector<PairGroupPlan> out;
  if (D <= 0 || D % kGroup != 0) return out;
  const int64_t ngroups = D / kGroup;
  std::vector<int32_t> groups;
  for (int64_t g = 0; g < ngroups; ++g) {
    PairGroupPlan p{};
    int32_t src[kLanes];  // source pair of each live lane, -1 for the others
    uint32_t live = 0;
    for (int l = 0; l < kLanes; ++l) {
      const int64_t j = g * kGroup + 2 * l;
      const int32_t p0 = partner[j], p1 = partner[j + 1];
      if (p0 >= 0) p.nonzero |= 1u << (2 * l);
      if (p1 >= 0) p.nonzero |= 1u << (2 * l + 1);
      if (p0 < 0 && p1 < 0) {
        src[l] = -1;
        continue;
      }
      // The even output reads element p0 of the source pair, the odd one p1: in order (p0 even,
      // p1 = p0 + 1) or swapped (p0 odd, p1 = p0 - 1); a missing partner takes the other's pair.
      const bool swapped = p0 >= 0 ? (p0 & 1) != 0 : (p1 & 1) == 0;
      const int32_t s = (p0 >= 0 ? p0 : p1) / 2;
      if ((p0 >= 0 && p0 != 2 * s + (swapped ? 1 : 0)) || (p1 >= 0 && p1 != 2 * s + (swapped ? 0 : 1))) {
        return {};  // the partners of this output pair are not one source pair
      }
      src[l] = s;
      live |= 1u << l;
      if (swapped) p.swap |= 1u << l;
      p.row_src[l] = s;
      if (s >= 2 * kLanes) p.row_hi |= 1u << l;
    }
    const int32_t own = static_cast<int32_t>(g * kLanes);  // first pair of this group
    // Offset: every live lane l reads pair first + l. `first` may be negative (lane 1 reading
    // pair 0), so whether it is set is kept apart from its value.
    bool same = true, offset = true, have_first = false;
    int32_t first = 0;
    for (int l = 0; l < kLanes; ++l) {
      if (!(live >> l & 1u)) continue;
      same = same && src[l] == own + l;
      if (!have_first) {
        first = src[l] - l;
        have_first = true;
      }
      offset = offset && src[l] == first + l;
    }
    // Runs of live lanes whose source pairs are consecutive.
    const int nseg = split_runs(src, static_cast<int>(kLanes), p.seg_base, p.seg_mask);
    for (int k = 0; k < std::min(nseg, kMaxSegments); ++k) p.seg_base[k] *= 2;  // in elements
    if (live == 0 || same) {
      p.kind = static_cast<int32_t>(PairKind::kSame);
    } else if (offset && first >= 0 && first + kLanes <= D / 2) {
      p.kind = static_cast<int32_t>(PairKind::kOffset);
      p.start = 2 * first;
    } else if (source_groups(src, live, 2, groups)) {
      p.kind = static_cast<int32_t>(PairKind::kPermute);
      p.a = groups[0];
      p.b = groups.size() > 1 ? groups[1] : groups[0];
      for (int l = 0; l < kLanes; ++l) p.idx[l] = (live >> l & 1u) ? lane_of(src[l], p.a) : 0;
    } else if (nseg <= kMaxSegments) {
      p.kind = static_cast<int32_t>(PairKind::kSegments);
      p.nseg = nseg;
    } else if (source_groups(src, live, 4, groups)) {
      p.kind = static_cast<int32_t>(PairKind::kPermute2);
      p.a = groups[0];
      p.b = groups[1];
      p.c = groups[2];
      p.d = groups.size() > 3 ? groups[3] : groups[2];
      for (int l = 0; l < kLanes; ++l) {
        if (!(live >> l & 1u)) continue;
        const int32_t sg = src[l] / kLanes;
        if (sg == p.a || sg == p.b) {
          p.idx[l] = lane_of(src[l], p.a);
        } else {
          p.mask2 |= 1u << l;
          p.idx2[l] = lane_of(src[l], p.c);
        }
      }
    } else {
      return {};  // partners from more than four groups: the chunk rows handle it
    }
    out.push_back(p);
  }
  return out;
}

PairShape pair_shape(const std::vector<PairGroupPlan>& groups) {
  const size_t ng = groups.size();
  bool swapped = true, offset = true, half = ng % 2 == 0;
  for (size_t i = 0; i < ng; ++i) {
    const PairGroupPlan& g = groups[i];
    swapped = swapped && g.kind == static_cast<int32_t>(PairKind::kSame) && g.swap == 0xFFFFu && g.nonzero == 0xFFFFFFFFu;
    offset = offset && g.kind == static_cast<int32_t>(PairKind::kOffset) && g.swap == 0 && g.nonzero == 0xFFFFFFFFu;
    half = half && g.start == static_cast<int32_t>(((i + ng / 2) % ng) * kGroup);
  }
  bool unswapped = true;
  for (const PairGroupPlan& g : groups) {
    unswapped = unswapped && g.kind != static_cast<int32_t>(PairKind::kSame) && g.swap == 0 && g.nonzero == 0xFFFFFFFFu;
  }
  if (offset && half) return PairShape::kHalfRotation;
  if (!offset && unswapped) return PairShape::kUnswapped;
  return swapped ? PairShape::kAllSwapped : offset ? PairShape::kAllOffset : PairShape::kMixed;
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
