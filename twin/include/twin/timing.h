// The twin's timing model: what each simulated core issued, recorded during a launch, and the
// discrete-event schedule computed from it afterwards (twin/src/timing.cpp).
//
// Recording hangs on what the pipe model already sees: PipeModel::issue starts an instruction on a
// pipe (its dependencies are that pipe's vector clock: the instructions of every other pipe it
// provably waits for), PipeModel::access gives the UB bytes a vector instruction touches,
// Launch::record_gm the GM bytes an MTE instruction moves, the Matmul reports each IterateAll, and
// Launch::cross_set / cross_wait the cross-core flags. After the launch, schedule() runs every
// core's pipes at once: instructions of one pipe in order, the pipes of one core overlapping as the
// recorded synchronisation allows, a cross-core wait holding every later instruction of its core
// until the matching set (plus the flag latency), and the HBM and L2 bandwidth shared by all
// transfers in flight (max-min fair shares, each transfer also capped by its pipe's own rate).
// Durations come from twin/timing_params.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "twin/hazard.h"
#include "twin/timing_params.h"

namespace twin::timing {

enum class Kind : uint8_t { Vector, Scalar, Mte, MatmulApi, Mmad };

struct GmRange {
  uint32_t region;
  bool write;
  uint64_t off, bytes;
};

struct Instr {
  uint8_t pipe = 0;
  Kind kind = Kind::Vector;
  const char* api = "";
  VClock deps{};           // per pipe: how many of its instructions (in issue order) must be done first
  uint32_t gate = 0;       // cross-core waits of this core issued before it: all must have passed
  uint64_t ub_bytes = 0;   // vector: the widest UB operand access, or all bytes written if more
  double cycles = 0;       // fixed cycles (compute, or the transfer's issue latency)
  double cap = 0;          // transfers: bytes per cycle this pipe moves at most
  std::vector<GmRange> gm;  // transfers: the GM bytes moved
};

struct SetEvent {  // a CrossCoreSetFlag
  int pipe;
  uint32_t after;  // instructions of `pipe` issued before it (it is raised when they are done)
  uint32_t gate;   // cross-core waits issued before it
};

struct WaitEvent {  // a CrossCoreWaitFlag that passed
  int slot, flag;
  uint32_t nth;  // this was the nth wait on (slot, flag): it consumed the nth increment
};

// One core's record. The hooks below are called by the API implementation on the core's thread.
struct CoreTrace {
  std::string name;
  bool aic = false;
  std::vector<Instr> ins;
  std::vector<SetEvent> sets;
  std::vector<WaitEvent> waits;
  uint32_t issued[kPipes] = {};
  const HwParams* params = nullptr;

  void on_api_entry() { std::fill(std::begin(open_), std::end(open_), -1); }
  void on_issue(int pipe, const char* api, const VClock& vc);
  void on_ub(int pipe, uint64_t bytes, bool write);
  void on_gm(int region, bool write, uint64_t off, uint64_t bytes);
  void on_matmul(int64_t m, int64_t n, int64_t k, int64_t base_m, int a_bytes, int b_region);
  void on_matmul_block(int64_t block) { mm_.block = block; }

 private:
  void add_range(Instr& in, const GmRange& r);
  uint32_t push(Instr in);
  int64_t open_[kPipes] = {-1, -1, -1, -1, -1, -1, -1, -1};  // instruction issued by the current API call
  uint64_t open_written_[kPipes] = {};                        // UB bytes it wrote so far
  std::vector<GmRange> pending_[kPipes];  // GM bytes accounted before their instruction was issued
  // the IterateAll being recorded: where its GM reads and writes go (B's to its first load, A's
  // and C's to those of the M block the Matmul is moving)
  struct {
    int64_t first_mte2 = -1, first_fix = -1, block = 0;
    int b_region = -1;
  } mm_;
};

// A cause of a flag counter increment: (core index, set index in that core's trace).
using Cause = std::pair<int, int>;

// The launch's record: every core's trace and, per (core slot, flag id), the counter increments
// in order with the sets that caused each (both vector cores' sets for a mode-2 pair).
struct Recorder {
  std::vector<CoreTrace> cores;
  std::vector<int> slot_core;  // flag slot -> core index
  struct Increment {
    int slot, flag;
    std::vector<Cause> causes;
  };
  std::vector<Increment> increments;
  std::vector<std::vector<std::vector<int>>> by_slot_flag;  // [slot][flag] -> increment ids in order
  std::vector<std::vector<uint32_t>> waits_seen;            // [slot][flag] -> waits passed so far
  HwParams params;
};

// Called by the Matmul's IterateAll (cube core): one [m, k] @ [k, n] product in blocks of base_m rows;
// its GM reads of region `b_region` are B's (whenever the Matmul accounts them), the others A's rows.
void matmul_iterate_all(int64_t m, int64_t n, int64_t k, int64_t base_m, int a_bytes, int b_region);
// Called by the IterateAll before it moves the A rows and C rows of its M block `block` (0, 1, ...).
void matmul_m_block(int64_t block);

struct Span {
  int core, pipe;
  double start, end;  // ns from the kernel start
  const char* api;
};

struct CoreResult {
  std::string name;  // the core's (CoreTrace::name)
  double end_ns = 0;
  double busy_ns[kPipes] = {};
  uint64_t hbm_read = 0, hbm_write = 0, l2_read = 0, l2_write = 0;
};

struct Result {
  double makespan_ns = 0;      // end of the last core's last pipe
  double predicted_us = 0;     // launch overhead + makespan
  std::vector<CoreResult> cores;
  std::vector<Span> spans;     // every instruction (filled when asked)
};

// Schedules a recorded launch; `with_spans` also keeps every instruction's start and end.
Result schedule(const Recorder& rec, bool with_spans);

// Writes `res.spans` as a Chrome/Perfetto trace (chrome://tracing JSON): one process per core, one
// thread per pipe, times in microseconds.
void write_chrome_trace(const Recorder& rec, const Result& res, const std::string& path);

}  // namespace twin::timing
