// The twin's timing model: recording hooks and the discrete-event schedule (see twin/timing.h).
#include "twin/timing.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <list>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "twin/core.h"

namespace twin::timing {

// ---- recording ------------------------------------------------------------------------------------

void on_issue(CoreTrace* trace, int pipe, const char* api, const VClock& vc) { trace->on_issue(pipe, api, vc); }

namespace {
// A transfer on `pipe`: the MTE issue latency, then GM bytes at up to `cap` bytes per cycle.
Instr transfer(int pipe, const char* api, double cap, const HwParams& p) {
  Instr in;
  in.pipe = static_cast<uint8_t>(pipe);
  in.kind = Kind::Mte;
  in.api = api;
  in.cycles = p.mte_latency_cycles;
  in.cap = cap;
  return in;
}
}  // namespace

uint32_t CoreTrace::push(Instr in) {
  in.gate = static_cast<uint32_t>(waits.size());
  ++issued[in.pipe];
  ins.push_back(std::move(in));
  return static_cast<uint32_t>(ins.size() - 1);
}

void CoreTrace::add_range(Instr& in, const GmRange& r) {
  if (!in.gm.empty()) {
    GmRange& last = in.gm.back();
    if (last.region == r.region && last.write == r.write && last.off + last.bytes == r.off) {
      last.bytes += r.bytes;
      return;
    }
  }
  in.gm.push_back(r);
}

void CoreTrace::on_issue(int pipe, const char* api, const VClock& vc) {
  if (aic) return;  // a cube core's instructions are its IterateAlls (on_matmul)
  const bool mte = pipe == kPipeMte2 || pipe == kPipeMte3;
  Instr in = mte ? transfer(pipe, api, params->mte_core_bytes_per_cycle, *params) : Instr{};
  in.pipe = static_cast<uint8_t>(pipe);
  in.api = api;
  in.deps = vc;
  in.deps[pipe] = vc[pipe] - 1;  // the earlier instructions of its own pipe (in order anyway)
  if (mte) {
    for (const GmRange& r : pending_[pipe]) add_range(in, r);
    pending_[pipe].clear();
  } else {
    in.kind = pipe == kPipeV ? Kind::Vector : Kind::Scalar;
  }
  open_[pipe] = push(std::move(in));
  open_written_[pipe] = 0;
}

void CoreTrace::on_ub(int pipe, uint64_t bytes, bool write) {
  if (open_[pipe] >= 0) {
    Instr& in = ins[open_[pipe]];
    if (write) open_written_[pipe] += bytes;  // a strided copy writes block by block
    in.ub_bytes = std::max({in.ub_bytes, bytes, open_written_[pipe]});
  }
}

void CoreTrace::on_gm(int region, bool write, uint64_t off, uint64_t bytes) {
  const GmRange r{static_cast<uint32_t>(region), write, off, bytes};
  if (aic) {
    if (mm_.first_mte2 < 0) return;  // no IterateAll open (nothing else moves GM bytes on a cube core)
    if (write) add_range(ins[mm_.first_fix + 3 * mm_.block], r);
    else if (region == mm_.b_region) add_range(ins[mm_.first_mte2], r);
    else add_range(ins[mm_.first_mte2 + 3 * mm_.block], r);
    return;
  }
  const int pipe = write ? kPipeMte3 : kPipeMte2;
  if (open_[pipe] >= 0) add_range(ins[open_[pipe]], r);
  else pending_[pipe].push_back(r);
}

void CoreTrace::on_matmul(int64_t m, int64_t n, int64_t k, int64_t base_m, int a_bytes, int b_region) {
  const HwParams& p = *params;
  const bool fp32 = a_bytes == 4;
  auto up = [](int64_t v, int64_t to) { return (v + to - 1) / to * to; };
  Instr api;
  api.pipe = kPipeS;
  api.kind = Kind::MatmulApi;
  api.api = "Matmul::IterateAll";
  api.cycles = p.matmul_fixed_cycles;
  api.deps[kPipeFix] = issued[kPipeFix];  // a synchronous IterateAll starts once the previous one is out
  api.deps[kPipeS] = issued[kPipeS];
  const uint32_t s = push(std::move(api));
  const uint32_t sSeq = issued[kPipeS];
  if (base_m <= 0) base_m = m;
  const int64_t blocks = (m + base_m - 1) / base_m;
  mm_.first_mte2 = s + 1;
  mm_.first_fix = s + 3;
  mm_.block = 0;
  mm_.b_region = b_region;
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t rows = std::min(base_m, m - j * base_m);
    Instr ld = transfer(kPipeMte2, "Matmul GM->L1 (A, B)", p.mte_core_bytes_per_cycle, p);
    ld.deps[kPipeS] = sSeq;
    ld.deps[kPipeMte2] = issued[kPipeMte2];
    push(std::move(ld));
    Instr mm;
    mm.pipe = kPipeM;
    mm.kind = Kind::Mmad;
    mm.api = "Matmul Mmad (+ L1->L0)";
    const double macs = static_cast<double>(up(rows, 16)) * up(n, 16) * up(k, fp32 ? 8 : 16);
    const double mac = macs / (fp32 ? p.cube_macs_float : p.cube_macs_half);
    const double mte1 = static_cast<double>(rows * k * a_bytes) / p.l0a_bytes_per_cycle +
                        static_cast<double>(k * n * a_bytes) / p.l0b_bytes_per_cycle;
    mm.cycles = std::max(mac, mte1);
    mm.deps[kPipeMte2] = issued[kPipeMte2];
    mm.deps[kPipeM] = issued[kPipeM];
    push(std::move(mm));
    Instr fx = transfer(kPipeFix, "Matmul FixPipe L0C->GM", p.fix_bytes_per_cycle, p);
    fx.deps[kPipeM] = issued[kPipeM];
    fx.deps[kPipeFix] = issued[kPipeFix];
    push(std::move(fx));
  }
}

void matmul_iterate_all(int64_t m, int64_t n, int64_t k, int64_t base_m, int a_bytes, int b_region) {
  CoreTrace* t = core().pipes.trace;
  if (t) t->on_matmul(m, n, k, base_m, a_bytes, b_region);
}

void matmul_m_block(int64_t block) {
  CoreTrace* t = core().pipes.trace;
  if (t) t->on_matmul_block(block);
}

// ---- scheduling -------------------------------------------------------------------------------------

namespace {

// L2: an LRU of lines; a line is dirty once written through L2 (its HBM write was charged then).
class L2Cache {
 public:
  L2Cache(double bytes, double line) : line_(static_cast<uint64_t>(line)), cap_(static_cast<size_t>(bytes / line)) {}
  // Splits a GM range into bytes served by L2 and bytes that go to HBM.
  void access(const GmRange& r, uint64_t& l2, uint64_t& hbm) {
    uint64_t off = r.off;
    const uint64_t end = r.off + r.bytes;
    while (off < end) {
      const uint64_t li = off / line_;
      const uint64_t next = std::min(end, (li + 1) * line_);
      const uint64_t b = next - off;
      const uint64_t key = (static_cast<uint64_t>(r.region) << 44) | li;
      auto it = map_.find(key);
      const bool hit = it != map_.end() && (!r.write || it->second->second);
      (hit ? l2 : hbm) += b;
      if (it != map_.end()) {
        it->second->second = it->second->second || r.write;
        lru_.splice(lru_.begin(), lru_, it->second);
      } else {
        lru_.emplace_front(key, r.write);
        map_[key] = lru_.begin();
        if (map_.size() > cap_) {
          map_.erase(lru_.back().first);
          lru_.pop_back();
        }
      }
      off = next;
    }
  }

 private:
  uint64_t line_;
  size_t cap_;
  std::list<std::pair<uint64_t, bool>> lru_;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, bool>>::iterator> map_;
};

struct Transfer {
  int core;
  uint32_t idx;
  int pool;              // 0: L2, 1: HBM
  double left;           // bytes left in this pool
  double hbm_after;      // bytes for HBM once the L2 part is done
  double cap;            // bytes per ns
  double rate = 0;
};

enum EvType { kDone, kLatency, kIncrement };
struct Event {
  double t;
  int type, a;
  uint32_t b;
  bool operator>(const Event& o) const { return t > o.t; }
};

// Max-min fair shares of `bw` among the transfers of one pool, each capped by its own rate.
void share(std::vector<Transfer*>& tr, double bw) {
  std::sort(tr.begin(), tr.end(), [](const Transfer* a, const Transfer* b) { return a->cap < b->cap; });
  double left = bw;
  size_t n = tr.size();
  for (Transfer* t : tr) {
    const double fair = left / static_cast<double>(n--);
    t->rate = std::min(t->cap, fair);
    left -= t->rate;
  }
}

}  // namespace

Result schedule(const Recorder& rec, bool with_spans) {
  const HwParams& P = rec.params;
  const double nspc = 1.0 / P.clock_ghz;  // ns per cycle
  const int C = static_cast<int>(rec.cores.size());
  Result res;
  res.cores.resize(C);
  for (int c = 0; c < C; ++c) res.cores[c].name = rec.cores[c].name;

  struct CoreState {
    std::vector<uint32_t> list[kPipes];
    uint32_t next[kPipes] = {}, done[kPipes] = {};
    bool busy[kPipes] = {};
    uint32_t waits_passed = 0;
    std::vector<char> set_done;
    uint32_t sets_left = 0;
    std::vector<double> start, end;
  };
  std::vector<CoreState> cs(C);
  for (int c = 0; c < C; ++c) {
    const CoreTrace& t = rec.cores[c];
    for (uint32_t i = 0; i < t.ins.size(); ++i) cs[c].list[t.ins[i].pipe].push_back(i);
    cs[c].set_done.assign(t.sets.size(), 0);
    cs[c].sets_left = static_cast<uint32_t>(t.sets.size());
    cs[c].start.assign(t.ins.size(), -1);
    cs[c].end.assign(t.ins.size(), -1);
  }
  // increments: causes still unresolved, release time; each set -> the increments it feeds
  const size_t NI = rec.increments.size();
  std::vector<int> inc_left(NI);
  std::vector<double> inc_time(NI, -1);
  std::vector<std::vector<std::vector<int>>> set_incs(C);
  for (int c = 0; c < C; ++c) set_incs[c].resize(rec.cores[c].sets.size());
  for (size_t i = 0; i < NI; ++i) {
    inc_left[i] = static_cast<int>(rec.increments[i].causes.size());
    for (const Cause& k : rec.increments[i].causes) set_incs[k.first][k.second].push_back(static_cast<int>(i));
  }

  L2Cache l2(P.l2_bytes, P.l2_line);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> pq;
  std::list<Transfer> active;
  double now = 0;
  std::vector<char> dirty(C, 1);

  auto vector_cycles = [&](const Instr& in) {
    if (in.kind == Kind::Scalar) return P.scalar_cycles;
    if (in.kind != Kind::Vector) return in.cycles;
    const double b = static_cast<double>(in.ub_bytes);
    if (std::string(in.api).rfind("Gather", 0) == 0) return P.vec_fixed_cycles + b / 4.0 / P.gather_elems_per_cycle;
    return P.vec_fixed_cycles + std::ceil(b / P.vec_bytes_per_cycle);
  };
  auto finish = [&](int c, uint32_t idx) {
    const Instr& in = rec.cores[c].ins[idx];
    cs[c].busy[in.pipe] = false;
    ++cs[c].done[in.pipe];
    cs[c].end[idx] = now;
    dirty[c] = 1;
  };
  auto start_bytes = [&](int c, uint32_t idx) {
    const Instr& in = rec.cores[c].ins[idx];
    uint64_t l2b = 0, hbm = 0;
    CoreResult& r = res.cores[c];
    for (const GmRange& g : in.gm) {
      uint64_t a = 0, h = 0;
      l2.access(g, a, h);
      l2b += a;
      hbm += h;
      (g.write ? r.l2_write : r.l2_read) += a;
      (g.write ? r.hbm_write : r.hbm_read) += h;
    }
    if (l2b + hbm == 0) return finish(c, idx);
    Transfer t{c, idx, l2b ? 0 : 1, static_cast<double>(l2b ? l2b : hbm), l2b ? static_cast<double>(hbm) : 0.0,
               in.cap / nspc};
    active.push_back(t);
  };
  auto try_core = [&](int c) {
    const CoreTrace& t = rec.cores[c];
    CoreState& s = cs[c];
    bool changed = true;
    while (changed) {
      changed = false;
      while (s.waits_passed < t.waits.size()) {
        const WaitEvent& w = t.waits[s.waits_passed];
        const auto& incs = rec.by_slot_flag[w.slot][w.flag];
        if (w.nth >= incs.size()) throw std::runtime_error("timing: a wait without its increment");
        const double it = inc_time[incs[w.nth]];
        if (it < 0 || it > now) break;
        ++s.waits_passed;
        changed = true;
      }
      if (s.sets_left) {
        for (size_t k = 0; k < t.sets.size(); ++k) {
          const SetEvent& e = t.sets[k];
          if (s.set_done[k] || s.waits_passed < e.gate || (e.pipe >= 0 && s.done[e.pipe] < e.after)) continue;
          s.set_done[k] = 1;
          --s.sets_left;
          for (int i : set_incs[c][k]) {
            if (--inc_left[i] == 0) pq.push({now + P.flag_latency_cycles * nspc, kIncrement, i, 0});
          }
        }
      }
      for (int p = 0; p < kPipes; ++p) {
        if (s.busy[p] || s.next[p] >= s.list[p].size()) continue;
        const uint32_t idx = s.list[p][s.next[p]];
        const Instr& in = t.ins[idx];
        if (s.waits_passed < in.gate) continue;
        bool ready = true;
        for (int q = 0; q < kPipes && ready; ++q) ready = s.done[q] >= in.deps[q];
        if (!ready) continue;
        s.busy[p] = true;
        ++s.next[p];
        s.start[idx] = now;
        if (in.kind == Kind::Mte) pq.push({now + in.cycles * nspc, kLatency, c, idx});
        else pq.push({now + vector_cycles(in) * nspc, kDone, c, idx});
        changed = true;
      }
    }
  };

  const double hbm_bw = P.hbm_gbps, l2_bw = P.l2_gbps;  // bytes per ns
  for (;;) {
    for (int c = 0; c < C; ++c) {
      if (dirty[c]) {
        dirty[c] = 0;
        try_core(c);
      }
    }
    std::vector<Transfer*> pools[2];
    for (Transfer& t : active) pools[t.pool].push_back(&t);
    share(pools[0], l2_bw);
    share(pools[1], hbm_bw);
    double t_next = pq.empty() ? std::numeric_limits<double>::infinity() : pq.top().t;
    for (Transfer& t : active) t_next = std::min(t_next, now + t.left / t.rate);
    if (!std::isfinite(t_next)) break;
    const double dt = t_next - now;
    now = t_next;
    for (auto it = active.begin(); it != active.end();) {
      it->left -= it->rate * dt;
      if (it->left <= 1e-6 * std::max(1.0, it->rate)) {
        if (it->pool == 0 && it->hbm_after > 0) {
          it->pool = 1;
          it->left = it->hbm_after;
          it->hbm_after = 0;
          ++it;
          continue;
        }
        finish(it->core, it->idx);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    while (!pq.empty() && pq.top().t <= now + 1e-9) {
      const Event e = pq.top();
      pq.pop();
      if (e.type == kDone) {
        finish(e.a, e.b);
      } else if (e.type == kLatency) {
        start_bytes(e.a, e.b);
      } else {
        inc_time[e.a] = e.t;
        const auto& inc = rec.increments[e.a];
        const int waiter = rec.slot_core[inc.slot];
        if (waiter >= 0) dirty[waiter] = 1;
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    const CoreTrace& t = rec.cores[c];
    for (uint32_t i = 0; i < t.ins.size(); ++i) {
      if (cs[c].end[i] < 0) {
        throw std::runtime_error("timing: the schedule stalled on " + t.name + " at " + t.ins[i].api +
                                 " (a dependency the recording did not resolve)");
      }
      const Instr& in = t.ins[i];
      const double d = cs[c].end[i] - cs[c].start[i];
      res.cores[c].busy_ns[in.pipe] += d;
      res.cores[c].end_ns = std::max(res.cores[c].end_ns, cs[c].end[i]);
      if (with_spans) res.spans.push_back({c, in.pipe, cs[c].start[i], cs[c].end[i], in.api});
    }
    res.makespan_ns = std::max(res.makespan_ns, res.cores[c].end_ns);
  }
  res.predicted_us = P.launch_us + res.makespan_ns / 1000.0;
  return res;
}

// ---- Chrome trace -------------------------------------------------------------------------------------

void write_chrome_trace(const Recorder& rec, const Result& res, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("timing: cannot write the trace to " + path);
  auto esc = [](const std::string& s) {
    std::string o;
    for (char ch : s) {
      if (ch == '"' || ch == '\\') o += '\\';
      o += ch;
    }
    return o;
  };
  f << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) f << ",\n";
    first = false;
  };
  for (size_t c = 0; c < rec.cores.size(); ++c) {
    sep();
    f << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << c << ",\"args\":{\"name\":\"" << esc(rec.cores[c].name)
      << "\"}}";
    for (int p = 0; p < kPipes; ++p) {
      if (p == kPipeAll) continue;
      sep();
      f << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << c << ",\"tid\":" << p << ",\"args\":{\"name\":\""
        << pipe_name(p) << "\"}}";
    }
  }
  char buf[64];
  for (const Span& s : res.spans) {
    sep();
    std::snprintf(buf, sizeof buf, "%.4f", s.start / 1000.0);
    f << "{\"name\":\"" << esc(s.api) << "\",\"ph\":\"X\",\"pid\":" << s.core << ",\"tid\":" << s.pipe << ",\"ts\":" << buf;
    std::snprintf(buf, sizeof buf, "%.4f", (s.end - s.start) / 1000.0);
    f << ",\"dur\":" << buf << "}";
  }
  f << "\n]}\n";
}

}  // namespace twin::timing
