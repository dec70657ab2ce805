// The twin's runtime: simulated cores, GM registry, cross-core flags, statistics, violations.
//
// One thread per simulated core. Everything the hardware keeps per core (core type, block index,
// UB, the TPipe) lives in a thread-local CoreCtx. A violation throws twin::Violation on the core
// that committed it; the launcher then aborts every other core (they throw twin::Abort at their
// next API call or flag wait) and reports the first violation.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "twin/hazard.h"
#include "twin/timing.h"

namespace twin {

enum class CoreType { AIC, AIV };

// Kernel types a launch can declare (subset of KernelMetaType that A2 supports).
enum class KernelKind { AIV_ONLY, AIC_ONLY, MIX_AIV_1_0, MIX_AIC_1_0, MIX_AIC_1_1, MIX_AIC_1_2 };

// A rule the kernel broke. `core` is "AIC_<b>" or "AIV_<2b+s>" (the hardware's own numbering),
// `rule` a short stable identifier tests match on, `what()` the full message with the values.
struct Violation : std::exception {
  std::string core, rule, detail, full;
  Violation(std::string c, std::string r, std::string d)
      : core(std::move(c)), rule(std::move(r)), detail(std::move(d)) {
    full = "[" + rule + "] on " + core + ": " + detail;
  }
  const char* what() const noexcept override { return full.c_str(); }
};

// Thrown on the other cores once one core has committed a violation.
struct Abort : std::exception {
  const char* what() const noexcept override { return "twin: aborted after a violation elsewhere"; }
};

// Hardware numbers used by the checks (Atlas A2, arch 2201).
constexpr uint32_t kUbTotalBytes = 196608;          // UB per vector core
constexpr uint32_t kUbUsableBytes = 196608 - 256 - 8192;  // minus framework + API reserve
constexpr uint32_t kBlockBytes = 32;                // DataCopy / UB alignment unit
constexpr uint32_t kMaxQueBuffersPerPosition = 8;   // TQue buffers on one TPosition
constexpr uint32_t kMaxPipeBuffers = 64;            // buffers managed by one TPipe
constexpr uint32_t kFlagIds = 16;                   // cross-core flag ids per core
constexpr uint32_t kFlagCounterMax = 15;            // cross-core flag counter range 0..15
constexpr int kPipeMte2 = 4, kPipeMte3 = 5, kPipeFix = 7;  // pipe_t values (kernel_operator.h)
constexpr uint32_t kFlagKfc = 15;                   // flag id the Matmul KFC messaging reserves
constexpr uint64_t kSysWorkspaceBytes = 16u << 20;  // system workspace (RESERVED_WORKSPACE)
constexpr uint64_t kDefaultOpLimit = 200000000;     // API calls per core before "runaway"

struct GmRegion {
  std::string name;
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  bool track_writes = false;                // count writes per byte (output coverage)
  bool init_check = false;                  // reading a byte never written is `uninitialized-read`
  bool published = false;                   // cross-core data: its accesses are published by flags
  std::unique_ptr<std::atomic<uint8_t>[]> write_count;
};

struct GmTraffic {
  uint64_t read = 0, write = 0;
};

struct CoreStats {
  std::string name;
  CoreType type = CoreType::AIV;
  int block = 0, sub = 0;
  int slot = 0;  // flag slot (Launch::flag_counter)
  std::map<std::string, GmTraffic> gm;  // per GM region name
  uint64_t ub_peak = 0;
  uint64_t flags_set = 0, flags_waited = 0;
  uint64_t ops = 0;
};

class Pipe;  // TPipe implementation (kernel_operator.h)

struct CoreCtx {
  CoreType type = CoreType::AIV;
  int block = 0;   // block index of the AI Core (0..blockDim-1)
  int sub = 0;     // vector sub-block 0/1 (0 on the cube core)
  int slot = 0;    // flag slot
  std::string name;
  CoreStats* stats = nullptr;
  Pipe* pipe = nullptr;
  int pipes_alive = 0;
  std::vector<uint8_t> ub;  // the vector core's unified buffer
  // per UB byte: 1 when it holds a value this launch wrote (a copy, Duplicate, SetValue) or computed
  // only from such values; what reaches GM must be (rule `uninitialized-read`)
  std::vector<uint8_t> ub_def;
  bool matmul_registered = false;
  // the system workspace address the generated wrapper set (SetSysWorkspaceForce; twin/kernel_wrapper.h)
  uint8_t* kfc_workspace = nullptr;
  // test-only: the HardEvent whose WaitFlag the Matmul model drops (twin/matmul_pipes.h), -1 for none
  int test_drop_wait = -1;
  // pipes (bit per pipe_t) of this core's accesses to cross-core (workspace) GM since its last
  // CrossCoreSetFlag, with the first such access for the message
  uint32_t published_pipes = 0;
  std::string published_what;
  // intra-core SetFlag/WaitFlag bits: [event][id]
  uint8_t hw_flags[64][8] = {};
  // the asynchronous pipes of this core and the last accesses per UB block (rule `pipe-race`)
  PipeModel pipes;
};

class Launch;

// The launch the calling thread belongs to, and its core context.
CoreCtx& core();
Launch& launch();
bool in_kernel();

[[noreturn]] void fail(const std::string& rule, const std::string& detail);
// Called by every API entry: aborts when another core failed, counts ops (runaway detection).
void tick();

template <typename... A>
std::string str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

class Launch {
 public:
  Launch(KernelKind kind, int block_dim, int max_aic);
  ~Launch();

  // GM registry: every pointer a kernel receives must lie inside a registered region.
  int add_region(const std::string& name, void* base, uint64_t bytes, bool track_writes = false,
                 bool init_check = false);
  int find_region(const void* p) const;  // -1 if none
  void set_published(int region) { regions_[region]->published = true; }
  const GmRegion& region(int id) const { return *regions_[id]; }
  void set_workspace(void* base, uint64_t bytes) {
    ws_base_ = static_cast<uint8_t*>(base);
    ws_bytes_ = bytes;
  }
  uint8_t* workspace() const { return ws_base_; }
  uint64_t workspace_bytes() const { return ws_bytes_; }
  void set_op_limit(uint64_t n) { op_limit_ = n; }
  // Records every core's instructions and flags for the timing model (twin/timing.h); call before run.
  void enable_timing(const timing::HwParams& p) {
    timing_ = std::make_unique<timing::Recorder>();
    timing_->params = p;
  }
  const timing::Recorder* timing() const { return timing_.get(); }

  // Runs `body` on every simulated core; returns normally or throws the first Violation.
  void run(const std::function<void()>& body);

  KernelKind kind() const { return kind_; }
  int block_dim() const { return block_dim_; }
  int max_aic() const { return max_aic_; }  // the SoC's cores of the launch's kind (AI Cores for MIX)
  const std::vector<CoreStats>& stats() const { return stats_; }
  // A flag counter after the run: slots AIV 2b+s at [0, 2B), AIC b at [2B, 3B).
  int flag_counter(int slot, int flag) const { return counters_[slot][flag]; }
  uint64_t op_limit() const { return op_limit_; }

  // ---- cross-core flags (CrossCoreSetFlag / CrossCoreWaitFlag) ----
  // `pipe`: the pipe_t of CrossCoreSetFlag; the set publishes the workspace accesses this core made
  // since its previous set, which must have run on that pipe (`flag-pipe-mismatch`).
  void cross_set(int mode, int flag, int pipe = -1);
  void cross_wait(int flag);
  // A mode-2 set of `flag` by library code on the calling cube core (the generated wrapper's
  // NotifyEvent, twin/kernel_wrapper.h): no flag-id or pipe rule applies, and nothing in a cube-only
  // kernel waits for it, so each target's counter may end the kernel that much above 0.
  void library_notify(int flag);

  // internal
  std::atomic<bool> aborted{false};
  void record_violation(const Violation& v);
  void record_gm(int region, bool write, uint64_t off, uint64_t bytes);

 private:
  std::string deadlock_report_locked();
  void check_deadlock_locked();
  void finish_checks();

  KernelKind kind_;
  int block_dim_;
  int max_aic_;
  std::vector<std::unique_ptr<GmRegion>> regions_;
  uint8_t* ws_base_ = nullptr;
  uint64_t ws_bytes_ = 0;
  uint64_t op_limit_ = kDefaultOpLimit;
  std::vector<CoreStats> stats_;
  std::vector<CoreCtx*> ctxs_;

  std::mutex mu_;
  std::condition_variable cv_;
  int live_ = 0, waiting_ = 0;
  // counters[slot][flag]; slots: AIV 2b+s at [0, 2B), AIC b at [2B, 3B)
  std::vector<std::array<int, kFlagIds>> counters_;
  // Sets not yet turned into counter increments, each as its cause (the core and its set for the
  // timing model; the count of them is the accumulator):
  // mode 0 sets arrived so far per core type ([2B] AIC, [2B + 1] AIV; the counters rise once every
  // core of the type has set), and mode 2 (AIV -> AIC, [0, B)) and mode 1 (AIV pair, [B, 2B)) sets
  // pending per vector sub-block: the target's counter rises only when BOTH vector cores of the
  // block have set (the hardware counts each AIV's sets separately; one AIV setting twice does not
  // stand in for the other).
  std::vector<std::array<std::vector<timing::Cause>, kFlagIds>> arrivals_;
  std::vector<std::array<std::array<std::deque<timing::Cause>, 2>, kFlagIds>> pending_;
  std::vector<int> waiting_on_;                       // per slot: flag id or -1
  std::vector<std::array<int, kFlagIds>> residual_;  // per slot: counts library_notify leaves at kernel end
  // timing model: the record and the sets behind the increment being made
  std::unique_ptr<timing::Recorder> timing_;
  std::vector<timing::Cause> cur_causes_;
  std::unique_ptr<Violation> first_;
};

}  // namespace twin
