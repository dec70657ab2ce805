// The twin's runtime: threads per simulated core, cross-core flag semaphores with the hardware's
// mode semantics, deadlock detection, GM traffic accounting.
#include "twin/core.h"

#include <algorithm>
#include <thread>

namespace twin {

namespace {
thread_local CoreCtx* t_core = nullptr;
thread_local Launch* t_launch = nullptr;

const char* kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::AIV_ONLY: return "KERNEL_TYPE_AIV_ONLY";
    case KernelKind::AIC_ONLY: return "KERNEL_TYPE_AIC_ONLY";
    case KernelKind::MIX_AIV_1_0: return "KERNEL_TYPE_MIX_AIV_1_0";
    case KernelKind::MIX_AIC_1_0: return "KERNEL_TYPE_MIX_AIC_1_0";
    case KernelKind::MIX_AIC_1_1: return "KERNEL_TYPE_MIX_AIC_1_1";
    case KernelKind::MIX_AIC_1_2: return "KERNEL_TYPE_MIX_AIC_1_2";
  }
  return "?";
}
}  // namespace

bool in_kernel() { return t_core != nullptr; }

CoreCtx& core() {
  if (!t_core) throw Violation("host", "not-in-kernel", "a kernel API was called outside a twin launch");
  return *t_core;
}

Launch& launch() {
  if (!t_launch) throw Violation("host", "not-in-kernel", "a kernel API was called outside a twin launch");
  return *t_launch;
}

void fail(const std::string& rule, const std::string& detail) {
  throw Violation(t_core ? t_core->name : std::string("host"), rule, detail);
}

void tick() {
  Launch& l = launch();
  if (l.aborted.load(std::memory_order_relaxed)) throw Abort();
  CoreCtx& c = *t_core;
  if (c.pipes.trace) c.pipes.trace->on_api_entry();
  if (++c.stats->ops > l.op_limit()) {
    fail("runaway", str("more than ", l.op_limit(),
                        " API calls on one core: the kernel loops (far) more than any tiling asks for"));
  }
}

Launch::Launch(KernelKind kind, int block_dim, int max_aic) : kind_(kind), block_dim_(block_dim), max_aic_(max_aic) {
  if (block_dim <= 0 || block_dim > max_aic) {
    throw Violation("host", "block-dim",
                    str("blockDim = ", block_dim, " must be in [1, ", max_aic,
                        "] (AI Cores of this SoC); more blocks than cores would serialise and "
                        "cross-core waits could deadlock"));
  }
}

Launch::~Launch() = default;

int Launch::add_region(const std::string& name, void* base, uint64_t bytes, bool track_writes, bool init_check) {
  auto r = std::make_unique<GmRegion>();
  r->init_check = init_check;
  if (init_check) track_writes = true;
  r->name = name;
  r->base = static_cast<uint8_t*>(base);
  r->bytes = bytes;
  r->track_writes = track_writes;
  if (track_writes) {
    r->write_count.reset(new std::atomic<uint8_t>[bytes]);
    for (uint64_t i = 0; i < bytes; ++i) r->write_count[i].store(0, std::memory_order_relaxed);
  }
  regions_.push_back(std::move(r));
  return static_cast<int>(regions_.size()) - 1;
}

int Launch::find_region(const void* p) const {
  auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const auto& r = *regions_[i];
    if (b >= r.base && b < r.base + r.bytes) return static_cast<int>(i);
  }
  // A zero-size tensor still has a base pointer; accept an exact match of an empty region.
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i]->bytes == 0 && regions_[i]->base == b) return static_cast<int>(i);
  }
  return -1;
}

void Launch::record_gm(int region, bool write, uint64_t off, uint64_t bytes) {
  CoreCtx& c = core();
  GmRegion& r = *regions_[region];
  auto& t = c.stats->gm[r.name];
  (write ? t.write : t.read) += bytes;
  if (c.pipes.trace) c.pipes.trace->on_gm(region, write, off, bytes);
  if (r.published) {
    // GM <-> workspace traffic runs on: the cube's FixPipe (L0C -> GM), MTE2 (GM -> L1/UB), MTE3 (UB -> GM).
    const int pipe = write ? (c.type == CoreType::AIC ? kPipeFix : kPipeMte3) : kPipeMte2;
    if (c.published_pipes == 0) {
      c.published_what = str(write ? "write" : "read", " of '", r.name, "' bytes [", off, ", ", off + bytes, ")");
    }
    c.published_pipes |= 1u << pipe;
  }
  if (!write && r.init_check) {
    for (uint64_t i = off; i < off + bytes; ++i) {
      if (r.write_count[i].load(std::memory_order_relaxed) == 0) {
        fail("uninitialized-read", str("read of GM '", r.name, "' bytes [", off, ", ", off + bytes, ") includes byte ", i,
                                       " that nothing wrote in this launch (the NPU would read stale data of an "
                                       "earlier launch or another operator)"));
      }
    }
  }
  if (write && r.track_writes) {
    for (uint64_t i = off; i < off + bytes; ++i) {
      uint8_t v = r.write_count[i].load(std::memory_order_relaxed);
      if (v < 255) r.write_count[i].store(v + 1, std::memory_order_relaxed);
    }
  }
}

void Launch::record_violation(const Violation& v) {
  std::lock_guard<std::mutex> g(mu_);
  if (!first_) first_ = std::make_unique<Violation>(v);
  aborted = true;
  cv_.notify_all();
}

void Launch::run(const std::function<void()>& body) {
  const int B = block_dim_;
  struct Spec {
    CoreType type;
    int block, sub;
  };
  std::vector<Spec> specs;
  const bool has_aic = kind_ != KernelKind::AIV_ONLY && kind_ != KernelKind::MIX_AIV_1_0;
  const int aiv_per_block = kind_ == KernelKind::MIX_AIC_1_2 ? 2
                            : (kind_ == KernelKind::MIX_AIC_1_1 || kind_ == KernelKind::AIV_ONLY ||
                               kind_ == KernelKind::MIX_AIV_1_0)
                                ? 1
                                : 0;
  for (int b = 0; b < B; ++b) {
    if (has_aic) specs.push_back({CoreType::AIC, b, 0});
    for (int s = 0; s < aiv_per_block; ++s) specs.push_back({CoreType::AIV, b, s});
  }
  counters_.assign(3 * B, {});
  arrivals_.assign(2 * B + 2, {});
  pending_.assign(2 * B, {});
  waiting_on_.assign(3 * B, -1);
  residual_.assign(3 * B, {});
  stats_.assign(specs.size(), {});
  std::vector<std::unique_ptr<CoreCtx>> ctxs;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto c = std::make_unique<CoreCtx>();
    c->type = specs[i].type;
    c->block = specs[i].block;
    c->sub = specs[i].sub;
    if (c->type == CoreType::AIC) {
      c->name = str("AIC_", c->block);
      c->slot = 2 * B + c->block;
    } else {
      c->name = str("AIV_", c->block * aiv_per_block + c->sub);
      c->slot = 2 * c->block + c->sub;
      c->ub.assign(kUbTotalBytes, 0xA5);  // stale-looking UB content
      c->ub_def.assign(kUbTotalBytes, 0);
    }
    stats_[i].name = c->name;
    stats_[i].type = c->type;
    stats_[i].block = c->block;
    stats_[i].sub = c->sub;
    stats_[i].slot = c->slot;
    c->stats = &stats_[i];
    ctxs_.push_back(c.get());
    ctxs.push_back(std::move(c));
  }
  if (timing_) {
    timing_->cores.assign(specs.size(), {});
    timing_->slot_core.assign(3 * B, -1);
    timing_->by_slot_flag.assign(3 * B, std::vector<std::vector<int>>(kFlagIds));
    timing_->waits_seen.assign(3 * B, std::vector<uint32_t>(kFlagIds, 0));
    for (size_t i = 0; i < specs.size(); ++i) {
      timing::CoreTrace& t = timing_->cores[i];
      t.name = ctxs[i]->name;
      t.aic = ctxs[i]->type == CoreType::AIC;
      t.params = &timing_->params;
      ctxs[i]->pipes.trace = &t;
      timing_->slot_core[ctxs[i]->slot] = static_cast<int>(i);
    }
  }
  live_ = static_cast<int>(specs.size());
  waiting_ = 0;
  std::vector<std::thread> threads;
  threads.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([this, &body, c = ctxs[i].get()] {
      t_core = c;
      t_launch = this;
      try {
        body();
      } catch (const Violation& v) {
        record_violation(v);
      } catch (const Abort&) {
      } catch (const std::exception& e) {
        record_violation(Violation(c->name, "exception", e.what()));
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        --live_;
        if (!aborted) check_deadlock_locked();
        cv_.notify_all();
      }
      t_core = nullptr;
      t_launch = nullptr;
    });
  }
  for (auto& t : threads) t.join();
  ctxs_.clear();
  if (first_) throw *first_;
  finish_checks();
}

// Every core still alive is blocked in a cross-core wait: nothing can ever set a flag again.
void Launch::check_deadlock_locked() {
  if (live_ > 0 && waiting_ == live_ && !aborted) {
    // A waiter whose counter is already non-zero has been signalled and will run again.
    for (size_t slot = 0; slot < waiting_on_.size(); ++slot) {
      if (waiting_on_[slot] >= 0 && counters_[slot][waiting_on_[slot]] > 0) return;
    }
    Violation v("all cores", "deadlock", deadlock_report_locked());
    if (!first_) first_ = std::make_unique<Violation>(v);
    aborted = true;
    cv_.notify_all();
  }
}

std::string Launch::deadlock_report_locked() {
  std::ostringstream os;
  os << "every live core waits on a cross-core flag that no running core can set; waiting:";
  const int B = block_dim_;
  for (int slot = 0; slot < 3 * B; ++slot) {
    if (waiting_on_[slot] < 0) continue;
    std::string name = slot < 2 * B ? str("AIV_", slot) : str("AIC_", slot - 2 * B);
    os << " " << name << " on flag " << waiting_on_[slot] << " (counter "
       << counters_[slot][waiting_on_[slot]] << ");";
  }
  for (int g = 0; g < static_cast<int>(pending_.size()); ++g) {
    for (int f = 0; f < static_cast<int>(kFlagIds); ++f) {
      const auto& p = pending_[g][f];
      if (p[0].size() == p[1].size()) continue;
      const int b = g % B;
      os << " mode-" << (g < B ? 2 : 1) << " flag " << f << " of block " << b << ": set " << p[0].size()
         << " times by AIV_" << 2 * b << ", " << p[1].size() << " by AIV_" << 2 * b + 1
         << " (the counter rises once BOTH have set);";
    }
  }
  os << " finished cores: " << (static_cast<int>(stats_.size()) - live_);
  return os.str();
}

void Launch::cross_set(int mode, int flag, int pipe) {
  CoreCtx& c = core();
  tick();
  if (pipe >= 0 && c.published_pipes != 0 && !(c.published_pipes & (1u << pipe))) {
    static const char* names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "ALL", "FIX"};
    std::string ran;
    for (int p = 0; p < 8; ++p) {
      if (c.published_pipes & (1u << p)) ran += std::string(ran.empty() ? "" : "/") + "PIPE_" + names[p];
    }
    fail("flag-pipe-mismatch",
         str("CrossCoreSetFlag<", mode, ", PIPE_", pipe < 8 ? names[pipe] : "?", ">(", flag,
             ") publishes workspace work that ran on ", ran, " (first: ", c.published_what,
             "): the flag would be raised before that work completed"));
  }
  c.published_pipes = 0;
  if (kind_ == KernelKind::AIC_ONLY || kind_ == KernelKind::AIV_ONLY) {
    fail("crosscore-kernel-type", str("CrossCoreSetFlag in a ", kind_name(kind_),
                                      " kernel: cross-core flags need a MIX kernel type"));
  }
  if (mode < 0 || mode > 2) fail("flag-mode", str("CrossCoreSetFlag mode ", mode, " is not 0, 1 or 2 on A2"));
  if (flag < 0 || flag >= static_cast<int>(kFlagIds)) {
    fail("flag-id", str("CrossCoreSetFlag flagId ", flag, " is outside 0..15 (hardware keeps only 4 bits)"));
  }
  if (flag >= 11 && flag <= 14) {
    fail("flag-id", str("CrossCoreSetFlag flagId ", flag, " is reserved for SyncAll (11..14)"));
  }
  if (flag == static_cast<int>(kFlagKfc)) {
    fail("flag-id", str("CrossCoreSetFlag flagId 15 is reserved for the Matmul API's KFC messages"));
  }
  if ((mode == 1 || mode == 2) && kind_ != KernelKind::MIX_AIC_1_1 && kind_ != KernelKind::MIX_AIC_1_2) {
    fail("crosscore-kernel-type", str("CrossCoreSetFlag mode ", mode, " needs KERNEL_TYPE_MIX_AIC_1_1/1_2, kernel is ",
                                      kind_name(kind_)));
  }
  if (mode == 1 && c.type != CoreType::AIV) fail("flag-mode", "CrossCoreSetFlag mode 1 (AIV pair) called on a cube core");
  std::lock_guard<std::mutex> g(mu_);
  if (aborted) throw Abort();
  c.stats->flags_set++;
  const int B = block_dim_;
  const int me = static_cast<int>(c.stats - stats_.data());
  timing::Cause my_cause{me, -1};
  if (timing_) {
    timing::CoreTrace& tr = timing_->cores[me];
    tr.sets.push_back({pipe, pipe >= 0 ? tr.issued[pipe] : 0u, static_cast<uint32_t>(tr.waits.size())});
    my_cause.second = static_cast<int>(tr.sets.size()) - 1;
  }
  cur_causes_.assign(1, my_cause);
  auto bump = [&](int slot) {
    int& v = counters_[slot][flag];
    if (v + 1 > static_cast<int>(kFlagCounterMax)) {
      std::string target = slot < 2 * B ? str("AIV_", slot) : str("AIC_", slot - 2 * B);
      fail("flag-counter-overflow", str("flag ", flag, " counter of ", target, " would exceed ", kFlagCounterMax,
                                        " (", v, " pending sets without a wait)"));
    }
    ++v;
    if (timing_) {
      timing_->by_slot_flag[slot][flag].push_back(static_cast<int>(timing_->increments.size()));
      timing_->increments.push_back({slot, flag, cur_causes_});
    }
  };
  const bool pair = kind_ == KernelKind::MIX_AIC_1_2;
  // A vector core's set in mode 1/2: pending until the other vector core of the block has set too.
  auto vector_pair_set = [&](int group, const std::function<void()>& release) {
    if (!pair) return release();
    auto& p = pending_[group][flag];
    if (p[c.sub].size() + 1 > kFlagCounterMax) {
      fail("flag-counter-overflow", str("flag ", flag, ": ", c.name, " set it ", p[c.sub].size() + 1,
                                        " times while the other vector core of block ", c.block, " did not"));
    }
    p[c.sub].push_back(my_cause);
    if (!p[0].empty() && !p[1].empty()) {
      cur_causes_ = {p[0].front(), p[1].front()};
      p[0].pop_front();
      p[1].pop_front();
      release();
    }
  };
  if (mode == 2) {
    if (c.type == CoreType::AIC) {
      bump(2 * c.block);
      if (pair) bump(2 * c.block + 1);
    } else {
      vector_pair_set(c.block, [&] { bump(2 * B + c.block); });
    }
  } else if (mode == 1) {
    vector_pair_set(B + c.block, [&] {
      bump(2 * c.block);
      if (pair) bump(2 * c.block + 1);
    });
  } else {  // mode 0: every core of this type of the launch
    const bool aic = c.type == CoreType::AIC;
    auto& ac = arrivals_[2 * B + (aic ? 0 : 1)][flag];
    const int n = aic ? B : B * (pair ? 2 : 1);
    ac.push_back(my_cause);
    if (static_cast<int>(ac.size()) == n) {
      cur_causes_.swap(ac);
      ac.clear();
      for (auto* other : ctxs_) {
        if (other->type == c.type) bump(other->slot);
      }
    }
  }
  cv_.notify_all();
}

void Launch::library_notify(int flag) {
  CoreCtx& c = core();
  tick();
  std::lock_guard<std::mutex> g(mu_);
  if (aborted) throw Abort();
  for (int s = 0; s < (kind_ == KernelKind::MIX_AIC_1_2 ? 2 : 1); ++s) {
    const int slot = 2 * c.block + s;
    ++counters_[slot][flag];
    ++residual_[slot][flag];
  }
  cv_.notify_all();
}

void Launch::cross_wait(int flag) {
  CoreCtx& c = core();
  tick();
  if (kind_ == KernelKind::AIC_ONLY || kind_ == KernelKind::AIV_ONLY) {
    fail("crosscore-kernel-type", str("CrossCoreWaitFlag in a ", kind_name(kind_),
                                      " kernel: cross-core flags need a MIX kernel type"));
  }
  if (flag < 0 || flag >= static_cast<int>(kFlagIds)) {
    fail("flag-id", str("CrossCoreWaitFlag flagId ", flag, " is outside 0..15"));
  }
  if (flag >= 11 && flag <= 14) {
    fail("flag-id", str("CrossCoreWaitFlag flagId ", flag, " is reserved for SyncAll (11..14)"));
  }
  if (flag == static_cast<int>(kFlagKfc)) {
    fail("flag-id", str("CrossCoreWaitFlag flagId 15 is reserved for the Matmul API's KFC messages"));
  }
  std::unique_lock<std::mutex> lk(mu_);
  int& v = counters_[c.slot][flag];
  while (v == 0) {
    if (aborted) throw Abort();
    ++waiting_;
    waiting_on_[c.slot] = flag;
    check_deadlock_locked();
    if (!aborted) cv_.wait(lk);
    --waiting_;
    waiting_on_[c.slot] = -1;
  }
  if (aborted) throw Abort();
  --v;
  c.stats->flags_waited++;
  if (timing_) {
    uint32_t& n = timing_->waits_seen[c.slot][flag];
    timing_->cores[c.stats - stats_.data()].waits.push_back({c.slot, flag, n++});
  }
}

void Launch::finish_checks() {
  const int B = block_dim_;
  for (int slot = 0; slot < 3 * B; ++slot) {
    for (int f = 0; f < static_cast<int>(kFlagIds); ++f) {
      if (counters_[slot][f] != residual_[slot][f]) {
        std::string name = slot < 2 * B ? str("AIV_", slot) : str("AIC_", slot - 2 * B);
        throw Violation(name, "flag-unbalanced",
                        str("flag ", f, " counter is ", counters_[slot][f],
                            " at kernel end: a set without its wait (the next launch would start with a stale flag)"));
      }
    }
  }
  for (size_t g = 0; g < pending_.size(); ++g) {
    for (int f = 0; f < static_cast<int>(kFlagIds); ++f) {
      const size_t p0 = pending_[g][f][0].size(), p1 = pending_[g][f][1].size();
      if (p0 || p1) {
        const int b = static_cast<int>(g) % B;
        throw Violation(str("block ", b), "flag-unbalanced",
                        str("flag ", f, ": AIV_", 2 * b, " set it ", p0, " times, AIV_", 2 * b + 1, " ", p1,
                            " times; the ", p0 > p1 ? p0 - p1 : p1 - p0,
                            " unmatched sets never reached the target before kernel end"));
      }
    }
  }
  for (size_t i = 0; i < arrivals_.size(); ++i) {
    for (int f = 0; f < static_cast<int>(kFlagIds); ++f) {
      if (!arrivals_[i][f].empty()) {
        throw Violation(str("block ", i % B), "flag-unbalanced",
                        str("flag ", f, ": only ", arrivals_[i][f].size(),
                            " of the cores a multi-core set needs arrived before kernel end"));
      }
    }
  }
}

}  // namespace twin

namespace twin {

const char* pipe_name(int pipe) {
  static const char* names[] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_ALL", "PIPE_FIX"};
  return pipe >= 0 && pipe < kPipes ? names[pipe] : "PIPE_?";
}

namespace {
[[noreturn]] void race(const char* mem, const char* kind, int q, const char* api_q, uint32_t e_q, int p, const char* api_p,
                       uint32_t e_p, uint64_t off, uint64_t bytes, uint64_t blk) {
  const uint64_t lo = std::max<uint64_t>(off, blk * kBlockBytes);
  const uint64_t hi = std::min<uint64_t>(off + bytes, (blk + 1) * kBlockBytes);
  const char* verb = kind[0] == 'R' ? "reads" : "writes";
  const char* earlier = kind[2] == 'W' ? "wrote" : "read";
  std::string pn = pipe_name(p) + 5, qn = pipe_name(q) + 5;
  fail("pipe-race",
       str(kind, " between pipes: ", api_q, " (instruction #", e_q, " of ", pipe_name(q), ") ", verb, " ", mem, " bytes [", lo,
           ", ", hi, ") (of its range [", off, ", ", off + bytes, ")) that ", api_p, " (instruction #", e_p, " of ",
           pipe_name(p), ") ", earlier, ", with no synchronisation from ", pipe_name(p), " to ", pipe_name(q),
           " in between (SetFlag/WaitFlag<HardEvent::", pn, "_", qn,
           ">, the TQue EnQue/DeQue or FreeTensor/AllocTensor that implies it, or PipeBarrier<PIPE_ALL>): on the NPU "
           "the two may run in either order"));
}
}  // namespace

void PipeModel::access(int q, uint64_t off, uint64_t bytes, bool write) { access_in(ub, "UB", q, off, bytes, write); }

void PipeModel::access_cube(int mem, int q, uint64_t off, uint64_t bytes, bool write) {
  static const char* names[kCubeMems] = {"L1", "L0A", "L0B", "L0C"};
  access_in(cube[mem], names[mem], q, off, bytes, write);
}

void PipeModel::access_in(std::vector<UbShadow>& shadow, const char* mem, int q, uint64_t off, uint64_t bytes, bool write) {
  if (bytes == 0) return;
  const uint64_t b0 = off / kBlockBytes, b1 = (off + bytes + kBlockBytes - 1) / kBlockBytes;
  if (shadow.size() < b1) shadow.resize(b1);
  const uint32_t e = vc[q][q];
  const VClock& seen = vc[q];
  const char* api = cur_api[q];
  if (trace) trace->on_ub(q, bytes, write);
  for (uint64_t b = b0; b < b1; ++b) {
    UbShadow& s = shadow[b];
    if (s.w_epoch && s.w_pipe != q && s.w_epoch > seen[s.w_pipe]) {
      race(mem, write ? "WAW" : "RAW", q, api, e, s.w_pipe, s.w_api, s.w_epoch, off, bytes, b);
    }
    if (write) {
      for (int p = 0; p < kPipes; ++p) {
        if (p != q && s.r_epoch[p] > seen[p]) race(mem, "WAR", q, api, e, p, s.r_api[p], s.r_epoch[p], off, bytes, b);
      }
      s.w_epoch = e;
      s.w_pipe = static_cast<uint8_t>(q);
      s.w_api = api;
      for (int p = 0; p < kPipes; ++p) s.r_epoch[p] = 0;
    } else {
      s.r_epoch[q] = e;
      s.r_api[q] = api;
    }
  }
}

}  // namespace twin
