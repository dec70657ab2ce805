// The pipe/hazard model of one core (the twin's runtime; rule `pipe-race`), over UB and the cube's
// L1, L0A, L0B, L0C.
//
// The hardware runs the instructions of one core on asynchronous pipes (S, V, M, MTE1, MTE2, MTE3,
// FIX): an instruction issued on one pipe may run before, during or after an earlier one on
// another pipe unless a synchronisation orders them. Each pipe keeps a vector clock: vc[q][p] is
// the number of pipe-p instructions pipe q has provably waited for. An instruction on pipe q takes
// the next epoch of q; a SetFlag<X_Y> snapshots vc[X], the matching WaitFlag joins it into vc[Y];
// PipeBarrier<PIPE_ALL> joins every pipe; a TQue implies its hardware events (VECIN: EnQue/DeQue is
// MTE2 -> V, FreeTensor/AllocTensor is V -> MTE2; VECOUT: V -> MTE3 and MTE3 -> V). Per 32-byte UB block the model keeps the last writer and the
// readers since then; an access on pipe q that conflicts (RAW, WAR, WAW) with an access on another
// pipe p whose epoch q has not waited for is a race. Instructions of one pipe issue in order but may
// overlap (twin/pipe_order.h checks the same-pipe rules on that): done[q] counts the pipe-q
// instructions known complete (a PipeBarrier<q>, PIPE_ALL, or an event whose snapshot covers them).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace twin {

constexpr int kPipes = 8;  // pipe_t values (PIPE_ALL = 6 is a barrier, not a pipe)
constexpr int kPipeS = 0, kPipeV = 1, kPipeM = 2, kPipeMte1 = 3, kPipeAll = 6;
constexpr int kCubeMems = 4, kL1 = 0, kL0A = 1, kL0B = 2, kL0C = 3;  // PipeModel::cube
using VClock = std::array<uint32_t, kPipes>;

namespace timing {
struct CoreTrace;  // twin/timing.h: the core's record for the timing model
void on_issue(CoreTrace* trace, int pipe, const char* api, const VClock& vc);
}  // namespace timing

struct UbShadow {  // one 32-byte UB block
  uint32_t w_epoch = 0;
  uint8_t w_pipe = 0;
  const char* w_api = nullptr;
  uint32_t r_epoch[kPipes] = {};
  const char* r_api[kPipes] = {};
};

// A GM write of an MTE3 instruction not yet known complete (twin/pipe_order.h).
struct GmPending {
  uint32_t epoch = 0;
  const char* api = nullptr;
  int region = -1;
  uint64_t lo = 0, hi = 0;
};

struct PipeModel {
  VClock vc[kPipes] = {};
  uint32_t done[kPipes] = {};
  std::vector<GmPending> mte3_gm;
  VClock event_snap[64][8] = {};
  std::vector<UbShadow> ub;  // grown on demand, one entry per 32-byte block
  std::vector<UbShadow> cube[kCubeMems];  // L1, L0A, L0B, L0C of a cube core, as `ub`
  const char* cur_api[kPipes] = {};
  timing::CoreTrace* trace = nullptr;  // set when the launch records timing

  // Starts an instruction on `pipe` (its accesses follow).
  void issue(int pipe, const char* api) {
    ++vc[pipe][pipe];
    cur_api[pipe] = api;
    if (trace) timing::on_issue(trace, pipe, api, vc[pipe]);
  }
  // Records an access of the current instruction of `pipe`; fails with `pipe-race` on a conflict.
  void access(int pipe, uint64_t off, uint64_t bytes, bool write);
  // The same on the cube core's local memories (kL1 .. kL0C), e.g. by the Matmul model.
  void access_cube(int mem, int pipe, uint64_t off, uint64_t bytes, bool write);
  void access_in(std::vector<UbShadow>& shadow, const char* mem, int pipe, uint64_t off, uint64_t bytes, bool write);
  // Everything issued on `src` so far becomes visible to `dst` (a SetFlag/WaitFlag pair).
  void join(int dst, const VClock& snap) {
    for (int p = 0; p < kPipes; ++p) vc[dst][p] = vc[dst][p] > snap[p] ? vc[dst][p] : snap[p];
    done[dst] = done[dst] > snap[dst] ? done[dst] : snap[dst];
  }
  void barrier_all() {
    VClock all{};
    for (int q = 0; q < kPipes; ++q)
      for (int p = 0; p < kPipes; ++p) all[p] = all[p] > vc[q][p] ? all[p] : vc[q][p];
    for (int q = 0; q < kPipes; ++q) vc[q] = all;
    for (int q = 0; q < kPipes; ++q) done[q] = all[q];
  }
};

const char* pipe_name(int pipe);

}  // namespace twin
