// The twin's runtime side of synchronisation inside a core: the HardEvent table (which pipes each
// event connects, which side of the AI Core skips it), SetFlag / WaitFlag / PipeBarrier on the pipe
// model of twin/hazard.h and their rules. basic_api/kernel_operator_block_sync_intf.h calls it.
#pragma once

#include <cstdint>

#include "twin/core.h"
#include "twin/hazard.h"
#include "twin/pipe_order.h"

namespace twin {

// The (source, destination) pipes of HardEvent `e` (the enum's order, kernel_type.h).
inline void event_pipes(int e, int& src, int& dst) {
  constexpr int S = 0, V = 1, M = 2, T1 = 3, T2 = 4, T3 = 5, F = 7;
  static constexpr int table[][2] = {
      {T2, T1}, {T1, T2}, {T1, M}, {M, T1}, {T2, V}, {V, T2}, {T3, V}, {V, T3}, {M, V}, {V, M}, {V, V}, {T3, T1},
      {T1, T3}, {T1, V}, {T2, M}, {M, T2}, {V, T1}, {M, F}, {F, M}, {T3, T2}, {T2, T3}, {S, V}, {V, S}, {S, T2},
      {T2, S}, {S, T3}, {T3, S}, {T2, F}, {F, T2}, {F, S}, {M, S}, {F, T3}, {T1, F}, {F, T1}, {F, F}};
  static_assert(sizeof(table) / sizeof(table[0]) == 35, "HardEvent pipe table");
  src = table[e][0];
  dst = table[e][1];
}

// The A2 implementation skips the vector events (MTE2_V, V_MTE2, MTE3_V, V_MTE3, V_V, S_V, V_S) on a
// cube core and the cube events (MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, M_FIX, FIX_M) on a vector core.
inline bool event_skipped(int e) {
  const bool vector = e == 4 || e == 5 || e == 6 || e == 7 || e == 10 || e == 21 || e == 22;
  const bool cube = e == 0 || e == 1 || e == 2 || e == 3 || e == 17 || e == 18;
  const CoreType t = core().type;
  return (t == CoreType::AIC && vector) || (t == CoreType::AIV && cube);
}

// A kernel's own eventID: `event-id` for 6 (reserved on A2) and 7 (TPipe's automatic
// synchronisation); user code takes its ids from AllocEventID / FetchEventID.
inline void check_user_event_id(const char* api, int32_t id) {
  if (id == 6 || id == 7) {
    fail("event-id", str(api, " eventID ", id, id == 6 ? " is reserved on A2" : " is used by TPipe's automatic synchronisation",
                         ": take event ids from GetTPipePtr()->AllocEventID / FetchEventID"));
  }
}

// SetFlag<e>(id): `event-id` (ids 0..7), `event-double-set` (the flag is a bit, not a counter).
inline void set_flag(int e, int32_t id) {
  tick();
  if (id < 0 || id > 7) fail("event-id", str("SetFlag eventID ", id, " outside 0..7"));
  if (event_skipped(e)) return;
  uint8_t& f = core().hw_flags[e][id];
  if (f) {
    fail("event-double-set",
         str("SetFlag<", e, ">(", id, ") twice without WaitFlag (undefined; a later PipeBarrier hangs)"));
  }
  f = 1;
  int src, dst;
  event_pipes(e, src, dst);
  auto& m = core().pipes;
  m.event_snap[e][id] = m.vc[src];
}

// WaitFlag<e>(id): `event-id`, `event-wait-unset` (a wait with no set before it never returns).
inline void wait_flag(int e, int32_t id) {
  tick();
  if (id < 0 || id > 7) fail("event-id", str("WaitFlag eventID ", id, " outside 0..7"));
  if (event_skipped(e)) return;
  uint8_t& f = core().hw_flags[e][id];
  if (!f) fail("event-wait-unset", str("WaitFlag<", e, ">(", id, ") without a SetFlag before it: the pipe would wait forever"));
  f = 0;
  int src, dst;
  event_pipes(e, src, dst);
  auto& m = core().pipes;
  m.join(dst, m.event_snap[e][id]);
}

// PipeBarrier<pipe>: `pipe-barrier` (PIPE_S is not allowed). PIPE_ALL orders every pipe; a barrier
// on one pipe makes its earlier instructions complete before its later ones start.
inline void pipe_barrier(int pipe) {
  tick();
  if (pipe == kPipeS) fail("pipe-barrier", "PipeBarrier<PIPE_S> is not allowed");
  if (pipe == kPipeAll) core().pipes.barrier_all();
  else barrier_pipe(pipe);
}

// CrossCoreSetFlag<mode, pipe>: `flag-pipe` (the set is issued on a pipe; S and ALL are not pipes
// it may name).
inline void check_cross_set_pipe(int pipe) {
  if (pipe == kPipeS || pipe == kPipeAll) {
    fail("flag-pipe", str("CrossCoreSetFlag on PIPE_", pipe == kPipeS ? "S" : "ALL",
                          ": only V, M, MTE1, MTE2, MTE3, FIX are allowed"));
  }
}

}  // namespace twin
