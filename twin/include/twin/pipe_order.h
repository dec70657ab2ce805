// The twin's same-pipe rule `same-pipe-overlap`: instructions of one pipe issue in order but may run
// overlapped, so two DataCopies whose destinations overlap need a PipeBarrier on their pipe in
// between: PipeBarrier<PIPE_MTE2> for UB destinations (GM -> UB), PipeBarrier<PIPE_MTE3> for GM
// destinations (UB -> GM) (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/GM与UB数据搬运/
// GM与UB连续数据搬运(DataCopy).md and GM与UB高维切分数据搬运(DataCopy).md, 约束说明). The vector pipe
// needs none: with the default --cce-auto-sync the compiler inserts the V -> V barriers itself.
// An earlier instruction also counts as complete once an event chain back to its pipe covers it
// (e.g. a TQue's FreeTensor -> AllocTensor -> ... -> EnQue -> DeQue round), as done[] in
// twin/hazard.h records.
#pragma once

#include <algorithm>
#include <cstdint>

#include "twin/core.h"
#include "twin/hazard.h"

namespace twin {

// PipeBarrier<pipe>: every instruction issued on `pipe` so far completes before the next one starts.
inline void barrier_pipe(int pipe) {
  auto& m = core().pipes;
  m.done[pipe] = m.vc[pipe][pipe];
}

// Before the current MTE2 instruction writes UB bytes [off, off + bytes): an earlier MTE2 write of
// any of those 32-byte blocks must be known complete.
inline void check_mte2_ub_overlap(uint64_t off, uint64_t bytes) {
  const auto& m = core().pipes;
  const uint32_t e = m.vc[kPipeMte2][kPipeMte2];
  const uint64_t b1 = std::min<uint64_t>((off + bytes + kBlockBytes - 1) / kBlockBytes, m.ub.size());
  for (uint64_t b = off / kBlockBytes; b < b1; ++b) {
    const UbShadow& s = m.ub[b];
    if (s.w_epoch && s.w_pipe == kPipeMte2 && s.w_epoch != e && s.w_epoch > m.done[kPipeMte2]) {
      fail("same-pipe-overlap",
           str(m.cur_api[kPipeMte2], " (instruction #", e, " of PIPE_MTE2) writes UB bytes [", b * kBlockBytes, ", ",
               (b + 1) * kBlockBytes, ") that ", s.w_api, " (instruction #", s.w_epoch,
               " of PIPE_MTE2) also writes, with no PipeBarrier<PIPE_MTE2> in between: on the NPU the two copies "
               "may overlap and either may land last"));
    }
  }
}

// The current MTE3 instruction writes GM bytes [off, off + bytes) of `region`: an earlier MTE3 write
// of any of them must be known complete.
inline void mte3_gm_write(int region, uint64_t off, uint64_t bytes) {
  auto& m = core().pipes;
  const uint32_t e = m.vc[kPipeMte3][kPipeMte3];
  const uint32_t done = m.done[kPipeMte3];
  auto& pend = m.mte3_gm;
  pend.erase(std::remove_if(pend.begin(), pend.end(), [done](const GmPending& g) { return g.epoch <= done; }), pend.end());
  for (const GmPending& g : pend) {
    if (g.epoch != e && g.region == region && g.lo < off + bytes && off < g.hi) {
      fail("same-pipe-overlap",
           str(m.cur_api[kPipeMte3], " (instruction #", e, " of PIPE_MTE3) writes GM '", launch().region(region).name,
               "' bytes [", std::max(off, g.lo), ", ", std::min(off + bytes, g.hi), ") that ", g.api,
               " (instruction #", g.epoch,
               " of PIPE_MTE3) also writes, with no PipeBarrier<PIPE_MTE3> in between: on the NPU the two copies "
               "may overlap and either may land last"));
    }
  }
  pend.push_back({e, m.cur_api[kPipeMte3], region, off, off + bytes});
}

}  // namespace twin
