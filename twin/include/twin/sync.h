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

// Whether `pipe` exists on a core of type `t`: the AIC has no vector pipe, the AIV no cube pipes
// (M, MTE1, FIX). asc-devkit docs/zh/api/SIMD-API/基础API/同步控制/核内同步/核内同步能力概述.md
// lists every in-core synchronisation A2 has, 表2 on the AIC and 表3 on the AIV: none names a pipe
// the core lacks.
inline bool pipe_on_core(int pipe, CoreType t) {
  if (t == CoreType::AIC) return pipe != kPipeV;
  return pipe != kPipeM && pipe != kPipeMte1 && pipe != kPipeFix;
}

// `event-core`: a SetFlag/WaitFlag, not skipped by the A2 API on this core, whose event names a pipe
// the core does not have (any event with M, MTE1 or FIX on a vector core but the six cube events the
// API skips there, e.g. V_M; M_V, V_M, MTE1_V, V_MTE1 on the cube core).
inline void check_event_core(const char* api, int e) {
  if (event_skipped(e)) return;
  int src, dst;
  event_pipes(e, src, dst);
  const CoreType t = core().type;
  if (pipe_on_core(src, t) && pipe_on_core(dst, t)) return;
  const bool aic = t == CoreType::AIC;
  fail("event-core", str(api, "<HardEvent::", pipe_name(src) + 5, "_", pipe_name(dst) + 5, "> on ",
                         aic ? "the cube core, which has no PIPE_V" : "a vector core, which has no PIPE_M, PIPE_MTE1 or PIPE_FIX",
                         ": not an in-core synchronisation of this core on A2 (the wait it stands for orders nothing)"));
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
  check_event_core("SetFlag", e);
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
  check_event_core("WaitFlag", e);
  if (event_skipped(e)) return;
  uint8_t& f = core().hw_flags[e][id];
  if (!f) fail("event-wait-unset", str("WaitFlag<", e, ">(", id, ") without a SetFlag before it: the pipe would wait forever"));
  f = 0;
  int src, dst;
  event_pipes(e, src, dst);
  auto& m = core().pipes;
  m.join(dst, m.event_snap[e][id]);
}

// PipeBarrier<pipe>: `pipe-barrier` (PIPE_S is not allowed); `event-core` for a pipe the vector core
// does not have (M, MTE1, FIX); the A2 API skips PipeBarrier<PIPE_V> on the cube core.
// PIPE_ALL orders every pipe; a barrier on one pipe makes its earlier instructions complete before
// its later ones start.
inline void pipe_barrier(int pipe) {
  tick();
  if (pipe == kPipeS) fail("pipe-barrier", "PipeBarrier<PIPE_S> is not allowed");
  const CoreType t = core().type;
  if (t == CoreType::AIC && pipe == kPipeV) return;
  if (pipe != kPipeAll && !pipe_on_core(pipe, t)) {
    fail("event-core", str("PipeBarrier<", pipe_name(pipe), "> on a vector core, which has no such pipe: the AIV's "
                           "barriers are on V, MTE2, MTE3 and ALL (A2)"));
  }
  if (pipe == kPipeAll) core().pipes.barrier_all();
  else barrier_pipe(pipe);
}

// CrossCoreSetFlag<mode, pipe>: `flag-pipe` (the set is issued on a pipe of the calling core; S and
// ALL are not pipes it may name, nor is V on the cube core or M, MTE1, FIX on a vector core).
inline void check_cross_set_pipe(int pipe) {
  if (pipe == kPipeS || pipe == kPipeAll) {
    fail("flag-pipe", str("CrossCoreSetFlag on PIPE_", pipe == kPipeS ? "S" : "ALL",
                          ": only V, M, MTE1, MTE2, MTE3, FIX are allowed"));
  }
  if (!pipe_on_core(pipe, core().type)) {
    const bool aic = core().type == CoreType::AIC;
    fail("flag-pipe", str("CrossCoreSetFlag on ", pipe_name(pipe), " on ", aic ? "the cube core" : "a vector core",
                          ", which has no such pipe (", aic ? "the AIC's are M, MTE1, MTE2, MTE3, FIX" : "the AIV's are V, MTE2, MTE3",
                          ")"));
  }
}

}  // namespace twin
