// The twin's kernel_operator.h: the subset of the Ascend C API that op_kernel/ uses, executed on
// the CPU, one thread per simulated core, with hard errors wherever the hardware would misbehave
// or silently do something else. See docs/kernel.md ("The CPU twin") for the rules it enforces.
#pragma once

// ASCENDC_CUBE_ONLY changes what the Ascend C headers declare, so it must be defined before the first
// of them; lib/matmul_intf.h checks this record of whether it was.
#define TWIN_KERNEL_OPERATOR_INCLUDED 1
#ifdef ASCENDC_CUBE_ONLY
#define TWIN_CUBE_ONLY_BEFORE_KERNEL_OPERATOR 1
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <type_traits>
#include <vector>

#include "twin/core.h"
#include "twin/types.h"

// ---- keywords and macros ------------------------------------------------------------------------
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
using GM_ADDR = uint8_t*;

enum KernelMetaType {
  KERNEL_TYPE_AIV_ONLY,
  KERNEL_TYPE_AIC_ONLY,
  KERNEL_TYPE_MIX_AIV_1_0,
  KERNEL_TYPE_MIX_AIC_1_0,
  KERNEL_TYPE_MIX_AIC_1_1,
  KERNEL_TYPE_MIX_AIC_1_2,
};

namespace twin {
// The kernel's declared type must match the type it was launched as.
inline void declare_kernel_type(KernelMetaType t) {
  tick();
  if (static_cast<int>(t) != static_cast<int>(launch().kind())) {
    fail("kernel-type", str("kernel declares KernelMetaType ", static_cast<int>(t), " but was launched as ",
                            static_cast<int>(launch().kind())));
  }
}
}  // namespace twin

#define KERNEL_TASK_TYPE_DEFAULT(t) ::twin::declare_kernel_type(t)
// As in CANN's CPU debug mode: a runtime test of the simulated core's type.
#define ASCEND_IS_AIC (::twin::core().type == ::twin::CoreType::AIC)
#define ASCEND_IS_AIV (::twin::core().type == ::twin::CoreType::AIV)

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };

namespace AscendC {

enum class TPosition { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, TSCM };
using QuePosition = TPosition;

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID };

enum class HardEvent {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1,
  MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2,
  MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX
};

template <typename T, typename U>
struct IsSameType {
  static constexpr bool value = std::is_same<T, U>::value;
};

// ---- index functions (A2, numbering as the hardware does it) -------------------------------------
// Only spellings every supported CANN version has (8.0.RC2 .. 9.x): GetTaskRatio (9.x only) and
// GetTaskRation (older) are deliberately absent, so a kernel using either fails to compile here.
}  // namespace AscendC
namespace twin {
// Vector cores per cube core of the running launch, as seen from the calling core.
inline int64_t task_ratio() {
  return launch().kind() == KernelKind::MIX_AIC_1_2 && core().type == CoreType::AIV ? 2 : 1;
}
}  // namespace twin
namespace AscendC {
inline int64_t GetBlockIdx() {
  auto& c = ::twin::core();
  if (c.type == ::twin::CoreType::AIC) return c.block;
  return c.block * ::twin::task_ratio() + c.sub;
}
inline int64_t GetBlockNum() { return ::twin::launch().block_dim(); }
inline int64_t GetSubBlockIdx() { return ::twin::core().type == ::twin::CoreType::AIC ? 0 : ::twin::core().sub; }
inline int64_t GetSubBlockNum() { return ::twin::task_ratio(); }

// ---- workspace ----------------------------------------------------------------------------------
// Device behaviour: the argument is ignored; the user part starts 16 MB after the system workspace.
inline GM_ADDR GetUserWorkspace(GM_ADDR /*workspace*/) {
  auto& l = ::twin::launch();
  if (l.workspace_bytes() < ::twin::kSysWorkspaceBytes) {
    ::twin::fail("workspace-size", ::twin::str("workspace is ", l.workspace_bytes(), " bytes, less than the ",
                                               ::twin::kSysWorkspaceBytes, "-byte system workspace"));
  }
  return l.workspace() + ::twin::kSysWorkspaceBytes;
}

// ---- GlobalTensor -------------------------------------------------------------------------------
template <typename T>
class GlobalTensor {
 public:
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) { set(buffer, bufferSize, true); }
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer) { set(buffer, 0, false); }
  __aicore__ inline GlobalTensor operator[](uint64_t offset) const {
    GlobalTensor g = *this;
    g.ptr_ = ptr_ + offset;
    g.off_ = off_ + offset;
    return g;
  }
  __aicore__ inline uint64_t GetSize() const { return size_ > off_ ? size_ - off_ : 0; }
  __aicore__ inline __gm__ T* GetPhyAddr() const { return ptr_; }
  __aicore__ inline T GetValue(uint64_t i) const {
    ::twin::tick();
    check(i, 1, false, "GlobalTensor::GetValue");
    return ptr_[i];
  }
  __aicore__ inline void SetValue(uint64_t i, T v) {
    ::twin::tick();
    check(i, 1, true, "GlobalTensor::SetValue");
    ptr_[i] = v;
  }

  // twin: validates [ptr_ + first, ptr_ + first + count) and accounts the traffic.
  void check(uint64_t first, uint64_t count, bool write, const char* api) const {
    check_span(first * sizeof(T), count * sizeof(T), count * sizeof(T), write, api);
  }
  // Extent of `span` bytes starting `byte_first` after ptr_, of which `moved` bytes are transferred.
  void check_span(uint64_t byte_first, uint64_t span, uint64_t moved, bool write, const char* api) const {
    auto& l = ::twin::launch();
    if (region_ < 0) ::twin::fail("gm-unregistered", ::twin::str(api, ": GlobalTensor used before SetGlobalBuffer"));
    const auto& r = l.region(region_);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(ptr_) + byte_first;
    const int64_t lo = p - r.base;
    const int64_t hi = lo + static_cast<int64_t>(span);
    if (sized_) {
      const int64_t elo = static_cast<int64_t>((off_)*sizeof(T) + byte_first);
      const int64_t ehi = elo + static_cast<int64_t>(span);
      if (elo < 0 || ehi > static_cast<int64_t>(size_ * sizeof(T))) {
        ::twin::fail("gm-out-of-bounds",
                     ::twin::str(api, (write ? " writes" : " reads"), " elements [", elo / sizeof(T), ", ",
                                 ehi / sizeof(T), ") of GlobalTensor '", r.name, "' which has ", size_,
                                 " elements (", ::twin::type_name<T>(), ")"));
      }
    }
    if (lo < 0 || hi > static_cast<int64_t>(r.bytes)) {
      ::twin::fail("gm-out-of-bounds", ::twin::str(api, (write ? " writes" : " reads"), " bytes [", lo, ", ", hi,
                                                   ") of GM allocation '", r.name, "' which has ", r.bytes,
                                                   " bytes"));
    }
    (void)moved;
  }
  void account(uint64_t byte_first, uint64_t bytes, bool write) const {
    auto& l = ::twin::launch();
    const auto& r = l.region(region_);
    const uint64_t off = reinterpret_cast<const uint8_t*>(ptr_) + byte_first - r.base;
    l.record_gm(region_, write, off, bytes);
  }
  T* raw() const { return ptr_; }
  int region() const { return region_; }

 private:
  void set(T* buffer, uint64_t n, bool sized) {
    ::twin::tick();
    auto& l = ::twin::launch();
    region_ = l.find_region(buffer);
    if (region_ < 0) {
      ::twin::fail("gm-unregistered", "SetGlobalBuffer with a pointer outside every GM allocation of the launch");
    }
    const auto& r = l.region(region_);
    const uint64_t lo = reinterpret_cast<uint8_t*>(buffer) - r.base;
    if (sized && lo + n * sizeof(T) > r.bytes) {
      ::twin::fail("gm-out-of-bounds", ::twin::str("SetGlobalBuffer declares ", n, " elements (", n * sizeof(T),
                                                   " bytes) at byte ", lo, " of GM allocation '", r.name,
                                                   "' which has only ", r.bytes, " bytes"));
    }
    ptr_ = buffer;
    size_ = n;
    off_ = 0;
    sized_ = sized;
  }
  T* ptr_ = nullptr;
  uint64_t size_ = 0;
  uint64_t off_ = 0;
  int region_ = -1;
  bool sized_ = false;
};

}  // namespace AscendC

// CANN declares this one at global scope, outside namespace AscendC; so does the twin.
inline GM_ADDR GetSysWorkSpacePtr() { return ::twin::launch().workspace(); }

// ---- UB buffers, TPipe, TQue, TBuf ----------------------------------------------------------------
namespace twin {

enum class BufState { FREE, OCCUPIED, ENQUE, DEQUE };
enum class Role { VecRead, VecWrite, MteIn, MteOut, Scalar };

struct BufInfo {
  uint32_t off = 0, len = 0;  // bytes in UB
  BufState state = BufState::FREE;
  uint32_t gen = 0;
  AscendC::TPosition pos = AscendC::TPosition::VECCALC;
  const void* owner = nullptr;  // the TQue / TBuf
  bool is_tbuf = false;
  const char* owner_name = "";
  // hazard model: vc of the producing pipe at EnQue, of the consuming pipe at FreeTensor
  VClock enq_snap{}, free_snap{};
};

// The pipes a TQue's implied hardware events connect: VECIN is filled by MTE2 and read by V,
// VECOUT filled by V and drained by MTE3; other positions imply no event (-1).
inline int que_producer(AscendC::TPosition pos) {
  return pos == AscendC::TPosition::VECIN ? kPipeMte2 : pos == AscendC::TPosition::VECOUT ? kPipeV : -1;
}
inline int que_consumer(AscendC::TPosition pos) {
  return pos == AscendC::TPosition::VECIN ? kPipeV : pos == AscendC::TPosition::VECOUT ? kPipeMte3 : -1;
}
// UB initcheck: true when all `n` shadow bytes at `d` are defined.
inline bool all_defined(const uint8_t* d, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (!d[k]) return false;
  return true;
}
// Starts an instruction on `pipe` of the calling core's hazard model.
inline void issue(int pipe, const char* api) { core().pipes.issue(pipe, api); }

class Pipe {
 public:
  std::vector<BufInfo> bufs;
  uint32_t used = 0;  // bytes carved from UB
  int que_bufs_per_pos[16] = {};
  uint32_t alloc(const char* what, AscendC::TPosition pos, uint32_t len, int num, bool queue, const void* owner) {
    tick();
    CoreCtx& c = core();
    if (c.type == CoreType::AIC) {
      fail("cube-core-ub", str(what, ": InitBuffer of a UB position on a cube core (the AIC has no UB)"));
    }
    if (num < 1 || num > 64) fail("pipe-init", str(what, ": buffer number ", num, " outside [1, 64]"));
    if (len == 0) fail("pipe-init", str(what, ": buffer length 0"));
    const uint32_t alen = (len + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
    if (bufs.size() + num > kMaxPipeBuffers) {
      fail("pipe-init", str(what, ": ", bufs.size() + num, " buffers in one TPipe, the limit is ", kMaxPipeBuffers));
    }
    if (queue) {
      int& n = que_bufs_per_pos[static_cast<int>(pos)];
      if (n + num > static_cast<int>(kMaxQueBuffersPerPosition)) {
        fail("pipe-init", str(what, ": ", n + num, " queue buffers on one TPosition, the A2 limit is ",
                              kMaxQueBuffersPerPosition));
      }
      n += num;
    }
    const uint64_t end = static_cast<uint64_t>(used) + static_cast<uint64_t>(alen) * num;
    if (end > kUbUsableBytes) {
      fail("ub-over-budget", str(what, ": InitBuffer(num=", num, ", len=", len, ") needs UB bytes up to ", end,
                                 "; usable UB is ", kUbUsableBytes, " (192 KiB minus 256 B framework and 8 KiB API "
                                 "reserve), already used ",
                                 used));
    }
    const uint32_t first = static_cast<uint32_t>(bufs.size());
    for (int i = 0; i < num; ++i) {
      BufInfo b;
      b.off = used;
      b.len = alen;
      b.pos = pos;
      b.owner = owner;
      b.is_tbuf = !queue;
      b.owner_name = what;
      b.state = queue ? BufState::FREE : BufState::OCCUPIED;
      bufs.push_back(b);
      used += alen;
    }
    c.stats->ub_peak = std::max<uint64_t>(c.stats->ub_peak, used);
    return first;
  }
};

inline Pipe& current_pipe(const char* api) {
  CoreCtx& c = core();
  if (!c.pipe) fail("no-tpipe", str(api, ": no TPipe alive on this core"));
  return *c.pipe;
}

}  // namespace twin

namespace AscendC {

template <typename T>
class LocalTensor {
 public:
  LocalTensor() = default;
  __aicore__ inline LocalTensor operator[](uint32_t offset) const {
    LocalTensor t = *this;
    t.off_ = off_ + offset * sizeof(T);
    t.len_ = offset <= len_ ? len_ - offset : 0;
    return t;
  }
  __aicore__ inline uint32_t GetSize() const { return len_; }
  __aicore__ inline uint64_t GetPhyAddr() const { return off_; }
  __aicore__ inline T GetValue(uint32_t i) const {
    ::twin::tick();
    check(1, ::twin::Role::Scalar, "LocalTensor::GetValue", i, false);
    ::twin::issue(::twin::kPipeS, "LocalTensor::GetValue");
    touch(::twin::kPipeS, i * sizeof(T), sizeof(T), false);
    require_defined("LocalTensor::GetValue", i * sizeof(T), sizeof(T));
    T v;
    std::memcpy(&v, ptr() + i, sizeof(T));
    return v;
  }
  __aicore__ inline void SetValue(uint32_t i, T v) {
    ::twin::tick();
    check(1, ::twin::Role::Scalar, "LocalTensor::SetValue", i, false);
    ::twin::issue(::twin::kPipeS, "LocalTensor::SetValue");
    touch(::twin::kPipeS, i * sizeof(T), sizeof(T), true);
    set_defined(i * sizeof(T), sizeof(T), true);
    std::memcpy(ptr() + i, &v, sizeof(T));
  }
  template <typename U>
  __aicore__ inline LocalTensor<U> ReinterpretCast() const {
    LocalTensor<U> t;
    t.buf_ = buf_;
    t.gen_ = gen_;
    t.off_ = off_;
    t.len_ = len_ * sizeof(T) / sizeof(U);
    return t;
  }

  // ---- twin internals ----
  T* ptr() const { return reinterpret_cast<T*>(::twin::core().ub.data() + off_); }
  // Records an access of `bytes` UB bytes from `byte_first` past this tensor's start by the
  // current instruction of `pipe` (hazard model).
  void touch(int pipe, uint64_t byte_first, uint64_t bytes, bool write) const {
    ::twin::core().pipes.access(pipe, off_ + byte_first, bytes, write);
  }
  // UB initcheck shadow (one byte per UB byte) of this tensor's first byte.
  uint8_t* defs() const { return ::twin::core().ub_def.data() + off_; }
  void set_defined(uint64_t byte_first, uint64_t bytes, bool v) const { std::memset(defs() + byte_first, v ? 1 : 0, bytes); }
  // Bytes about to leave the core (to GM or the scalar unit) must hold written values.
  void require_defined(const char* api, uint64_t byte_first, uint64_t bytes) const {
    const uint8_t* d = defs() + byte_first;
    for (uint64_t k = 0; k < bytes; ++k) {
      if (!d[k]) {
        ::twin::fail("uninitialized-read",
                     ::twin::str(api, " takes UB bytes [", off_ + byte_first, ", ", off_ + byte_first + bytes,
                                 ") of which byte ", off_ + byte_first + k, " holds no value written in this launch ",
                                 "(nor one computed only from written values): the NPU would use stale UB content"));
      }
    }
  }
  // GM -> UB copies land only in VECIN / VECOUT buffers on A2 (the MTE2 path of a TBuf<VECCALC>
  // or another position is not a valid copy target).
  void check_gm_to_ub_position(const char* api) const {
    auto& pipe = ::twin::current_pipe(api);
    if (buf_ < 0 || buf_ >= static_cast<int>(pipe.bufs.size())) return;  // check() reports it
    const ::twin::BufInfo& b = pipe.bufs[buf_];
    if (b.pos != TPosition::VECIN && b.pos != TPosition::VECOUT) {
      ::twin::fail("datacopy-position", ::twin::str(api, ": GM -> UB into a ", b.is_tbuf ? "TBuf" : "TQue",
                                                    " of position ", static_cast<int>(b.pos),
                                                    " (A2 copies GM -> UB only into VECIN or VECOUT buffers)"));
    }
  }
  // Validates this tensor as an operand of `count` elements starting at element `first`.
  void check(uint64_t count, ::twin::Role role, const char* api, uint64_t first = 0, bool need_align = true) const {
    auto& pipe = ::twin::current_pipe(api);
    if (buf_ < 0 || buf_ >= static_cast<int>(pipe.bufs.size())) {
      ::twin::fail("ub-invalid-tensor", ::twin::str(api, ": LocalTensor was not obtained from a TQue/TBuf of this core's TPipe"));
    }
    const ::twin::BufInfo& b = pipe.bufs[buf_];
    if (b.gen != gen_ || b.state == ::twin::BufState::FREE) {
      ::twin::fail("use-after-free", ::twin::str(api, ": tensor of ", b.owner_name, " used after FreeTensor (the buffer ",
                                                 "may already hold another tile)"));
    }
    if (need_align && off_ % ::twin::kBlockBytes != 0) {
      ::twin::fail("ub-align", ::twin::str(api, ": UB address ", off_, " is not 32-byte aligned"));
    }
    if ((first + count) * sizeof(T) + off_ > static_cast<uint64_t>(b.off) + b.len) {
      ::twin::fail("ub-out-of-bounds", ::twin::str(api, ": ", first + count, " elements of ", ::twin::type_name<T>(),
                                                   " at UB byte ", off_, " pass the end of the ", b.len,
                                                   "-byte buffer of ", b.owner_name, " at ", b.off));
    }
    if (b.is_tbuf || role == ::twin::Role::Scalar) return;
    using ::twin::BufState;
    using ::twin::Role;
    const bool in = b.pos == TPosition::VECIN;
    BufState need;
    if (in) need = role == Role::MteIn ? BufState::OCCUPIED : BufState::DEQUE;
    else need = role == Role::MteOut ? BufState::DEQUE : BufState::OCCUPIED;
    if (b.state != need) {
      const char* why = in ? (role == Role::MteIn ? "GM->UB copy into a VECIN buffer that is not freshly allocated"
                                                  : "vector use of a VECIN tensor before DeQue: the MTE2->V wait is missing")
                           : (role == Role::MteOut ? "UB->GM copy of a VECOUT tensor before DeQue: the V->MTE3 wait is missing"
                                                   : "vector use of a VECOUT tensor after EnQue/DeQue");
      ::twin::fail("que-state", ::twin::str(api, ": ", why, " (", b.owner_name, ")"));
    }
  }
  int buf_ = -1;
  uint32_t gen_ = 0;
  uint32_t off_ = 0;  // byte offset in UB
  uint32_t len_ = 0;  // elements
};

class TPipe;

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue {
 public:
  template <typename T>
  __aicore__ inline LocalTensor<T> AllocTensor() {
    ::twin::tick();
    auto& pipe = ::twin::current_pipe("TQue::AllocTensor");
    if (ids_.empty()) ::twin::fail("que-uninit", "TQue::AllocTensor before TPipe::InitBuffer");
    for (size_t k = 0; k < ids_.size(); ++k) {
      const size_t i = (rr_ + k) % ids_.size();
      auto& b = pipe.bufs[ids_[i]];
      if (b.state == ::twin::BufState::FREE) {
        rr_ = (i + 1) % ids_.size();
        b.state = ::twin::BufState::OCCUPIED;
        // the buffer's last FreeTensor set consumer -> producer; AllocTensor waits for it
        if (::twin::que_producer(pos) >= 0) ::twin::core().pipes.join(::twin::que_producer(pos), b.free_snap);
        LocalTensor<T> t;
        t.buf_ = ids_[i];
        t.gen_ = b.gen;
        t.off_ = b.off;
        t.len_ = b.len / sizeof(T);
        return t;
      }
    }
    ::twin::fail("que-alloc-exhausted",
                 ::twin::str("TQue::AllocTensor with all ", ids_.size(), " buffers of ", name_,
                             " in use (none freed): the NPU would wait forever for a free buffer"));
  }
  template <typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& t) {
    ::twin::tick();
    auto& b = own(t.buf_, "TQue::EnQue");
    if (b.gen != t.gen_ || b.state == ::twin::BufState::FREE) {
      ::twin::fail("use-after-free", ::twin::str("TQue::EnQue of a tensor of ", name_, " after FreeTensor"));
    }
    if (b.state == ::twin::BufState::ENQUE) ::twin::fail("que-state", ::twin::str("TQue::EnQue twice (", name_, ")"));
    if (static_cast<int32_t>(fifo_.size()) >= depth) {
      ::twin::fail("que-enque-full", ::twin::str("TQue::EnQue on ", name_, " which already holds ", fifo_.size(),
                                                 " tensors (depth ", depth, ")"));
    }
    b.state = ::twin::BufState::ENQUE;
    if (::twin::que_producer(pos) >= 0) b.enq_snap = ::twin::core().pipes.vc[::twin::que_producer(pos)];
    fifo_.push_back(t.buf_);
    return true;
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> DeQue() {
    ::twin::tick();
    auto& pipe = ::twin::current_pipe("TQue::DeQue");
    if (fifo_.empty()) {
      ::twin::fail("que-deque-empty", ::twin::str("TQue::DeQue on empty ", name_,
                                                  ": the NPU would wait for an EnQue that never comes"));
    }
    const int id = fifo_.front();
    fifo_.pop_front();
    auto& b = pipe.bufs[id];
    b.state = ::twin::BufState::DEQUE;
    if (::twin::que_consumer(pos) >= 0) ::twin::core().pipes.join(::twin::que_consumer(pos), b.enq_snap);
    LocalTensor<T> t;
    t.buf_ = id;
    t.gen_ = b.gen;
    t.off_ = b.off;
    t.len_ = b.len / sizeof(T);
    return t;
  }
  template <typename T>
  __aicore__ inline void FreeTensor(LocalTensor<T>& t) {
    ::twin::tick();
    auto& b = own(t.buf_, "TQue::FreeTensor");
    if (b.state == ::twin::BufState::FREE || b.gen != t.gen_) {
      ::twin::fail("que-double-free", ::twin::str("TQue::FreeTensor of a tensor of ", name_, " that is already free"));
    }
    if (b.state == ::twin::BufState::ENQUE) {
      ::twin::fail("que-state", ::twin::str("TQue::FreeTensor of a tensor of ", name_, " that is still enqueued"));
    }
    b.state = ::twin::BufState::FREE;
    if (::twin::que_consumer(pos) >= 0) b.free_snap = ::twin::core().pipes.vc[::twin::que_consumer(pos)];
    ++b.gen;
  }

  // twin internals
  std::vector<int> ids_;
  std::deque<int> fifo_;
  size_t rr_ = 0;
  const char* name_ = pos == TPosition::VECIN ? "TQue<VECIN>" : pos == TPosition::VECOUT ? "TQue<VECOUT>" : "TQue";

 private:
  ::twin::BufInfo& own(int id, const char* api) {
    auto& pipe = ::twin::current_pipe(api);
    if (id < 0 || id >= static_cast<int>(pipe.bufs.size()) || pipe.bufs[id].owner != this) {
      ::twin::fail("que-foreign-tensor", ::twin::str(api, ": tensor does not belong to this queue (", name_, ")"));
    }
    return pipe.bufs[id];
  }
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
 public:
  template <typename T>
  __aicore__ inline LocalTensor<T> Get() {
    return Get<T>(len_ / sizeof(T));
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> Get(uint32_t len) {
    ::twin::tick();
    if (id_ < 0) ::twin::fail("que-uninit", "TBuf::Get before TPipe::InitBuffer");
    if (static_cast<uint64_t>(len) * sizeof(T) > len_) {
      ::twin::fail("ub-out-of-bounds", ::twin::str("TBuf::Get<", ::twin::type_name<T>(), ">(", len, ") exceeds the ", len_,
                                                   "-byte buffer"));
    }
    auto& pipe = ::twin::current_pipe("TBuf::Get");
    LocalTensor<T> t;
    t.buf_ = id_;
    t.gen_ = pipe.bufs[id_].gen;
    t.off_ = pipe.bufs[id_].off;
    t.len_ = len;
    return t;
  }
  int id_ = -1;
  uint32_t len_ = 0;
};

class TPipe {
 public:
  __aicore__ inline TPipe() {
    auto& c = ::twin::core();
    if (c.pipes_alive > 0) ::twin::fail("tpipe-multiple", "a second TPipe while one is alive on this core");
    ++c.pipes_alive;
    c.pipe = &impl_;
  }
  __aicore__ inline ~TPipe() {
    if (!::twin::in_kernel()) return;
    auto& c = ::twin::core();
    --c.pipes_alive;
    if (c.pipe == &impl_) c.pipe = nullptr;
  }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;

  template <TPosition pos, int32_t depth, auto mask>
  __aicore__ inline bool InitBuffer(TQue<pos, depth, mask>& que, uint8_t num, uint32_t len) {
    if (!que.ids_.empty()) ::twin::fail("pipe-init", "InitBuffer twice on the same TQue");
    const uint32_t first = impl_.alloc(que.name_, pos, len, num, true, &que);
    for (uint32_t i = 0; i < num; ++i) que.ids_.push_back(static_cast<int>(first + i));
    return true;
  }
  template <TPosition pos>
  __aicore__ inline bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
    if (buf.id_ >= 0) ::twin::fail("pipe-init", "InitBuffer twice on the same TBuf");
    buf.id_ = static_cast<int>(impl_.alloc("TBuf", pos, len, 1, false, &buf));
    buf.len_ = impl_.bufs[buf.id_].len;
    return true;
  }
  __aicore__ inline void Destroy() {}
  ::twin::Pipe& impl() { return impl_; }

 private:
  ::twin::Pipe impl_;
};

inline TPipe* GetTPipePtr() { return nullptr; }

// ---- intra-core synchronisation ------------------------------------------------------------------
namespace detail {
inline bool is_vector_event(HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_V: case HardEvent::V_MTE2: case HardEvent::MTE3_V: case HardEvent::V_MTE3:
    case HardEvent::V_V: case HardEvent::S_V: case HardEvent::V_S: return true;
    default: return false;
  }
}
inline bool is_cube_event(HardEvent e) {
  switch (e) {
    case HardEvent::MTE2_MTE1: case HardEvent::MTE1_MTE2: case HardEvent::MTE1_M: case HardEvent::M_MTE1:
    case HardEvent::M_FIX: case HardEvent::FIX_M: return true;
    default: return false;
  }
}
// The (source, destination) pipes of each HardEvent, in the enum's order.
inline void event_pipes(HardEvent e, int& src, int& dst) {
  constexpr int S = 0, V = 1, M = 2, T1 = 3, T2 = 4, T3 = 5, F = 7;
  static constexpr int table[][2] = {
      {T2, T1}, {T1, T2}, {T1, M}, {M, T1}, {T2, V}, {V, T2}, {T3, V}, {V, T3}, {M, V}, {V, M}, {V, V}, {T3, T1},
      {T1, T3}, {T1, V}, {T2, M}, {M, T2}, {V, T1}, {M, F}, {F, M}, {T3, T2}, {T2, T3}, {S, V}, {V, S}, {S, T2},
      {T2, S}, {S, T3}, {T3, S}, {T2, F}, {F, T2}, {F, S}, {M, S}, {F, T3}, {T1, F}, {F, T1}, {F, F}};
  static_assert(sizeof(table) / sizeof(table[0]) == static_cast<int>(HardEvent::MAX), "HardEvent pipe table");
  src = table[static_cast<int>(e)][0];
  dst = table[static_cast<int>(e)][1];
}
inline bool skipped(HardEvent e) {
  auto& c = ::twin::core();
  return (c.type == ::twin::CoreType::AIC && is_vector_event(e)) || (c.type == ::twin::CoreType::AIV && is_cube_event(e));
}
}  // namespace detail

template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID) {
  ::twin::tick();
  if (eventID < 0 || eventID > 7) ::twin::fail("event-id", ::twin::str("SetFlag eventID ", eventID, " outside 0..7"));
  if (detail::skipped(event)) return;
  uint8_t& f = ::twin::core().hw_flags[static_cast<int>(event)][eventID];
  if (f) {
    ::twin::fail("event-double-set", ::twin::str("SetFlag<", static_cast<int>(event), ">(", eventID,
                                                 ") twice without WaitFlag (undefined; a later PipeBarrier hangs)"));
  }
  f = 1;
  int src, dst;
  detail::event_pipes(event, src, dst);
  auto& m = ::twin::core().pipes;
  m.event_snap[static_cast<int>(event)][eventID] = m.vc[src];
}
template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID) {
  ::twin::tick();
  if (eventID < 0 || eventID > 7) ::twin::fail("event-id", ::twin::str("WaitFlag eventID ", eventID, " outside 0..7"));
  if (detail::skipped(event)) return;
  uint8_t& f = ::twin::core().hw_flags[static_cast<int>(event)][eventID];
  if (!f) {
    ::twin::fail("event-wait-unset", ::twin::str("WaitFlag<", static_cast<int>(event), ">(", eventID,
                                                 ") without a SetFlag before it: the pipe would wait forever"));
  }
  f = 0;
  int src, dst;
  detail::event_pipes(event, src, dst);
  auto& m = ::twin::core().pipes;
  m.join(dst, m.event_snap[static_cast<int>(event)][eventID]);
}
template <pipe_t pipe>
__aicore__ inline void PipeBarrier() {
  ::twin::tick();
  if (pipe == PIPE_S) ::twin::fail("pipe-barrier", "PipeBarrier<PIPE_S> is not allowed");
  // PIPE_ALL waits for every pipe; a barrier on one pipe orders only that pipe, which the model
  // already takes to run in order.
  if (pipe == PIPE_ALL) ::twin::core().pipes.barrier_all();
}

// ---- cross-core synchronisation -------------------------------------------------------------------
template <uint8_t modeId, pipe_t pipe>
__aicore__ inline void CrossCoreSetFlag(uint16_t flagId) {
  if (pipe == PIPE_S || pipe == PIPE_ALL) {
    ::twin::fail("flag-pipe", ::twin::str("CrossCoreSetFlag on PIPE_", pipe == PIPE_S ? "S" : "ALL",
                                          ": only V, M, MTE1, MTE2, MTE3, FIX are allowed"));
  }
  ::twin::launch().cross_set(modeId, flagId, static_cast<int>(pipe));
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
__aicore__ inline void CrossCoreWaitFlag(uint16_t flagId) {
  ::twin::launch().cross_wait(flagId);
}

// ---- data movement --------------------------------------------------------------------------------
struct DataCopyParams {
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;
  uint16_t srcStride = 0;
  uint16_t dstStride = 0;
  DataCopyParams() = default;
  DataCopyParams(uint16_t count, uint16_t len, uint16_t srcGap, uint16_t dstGap)
      : blockCount(count), blockLen(len), srcStride(srcGap), dstStride(dstGap) {}
};

struct DataCopyExtParams {
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;   // bytes
  uint32_t srcStride = 0;  // GM side: bytes; UB side: 32-byte blocks
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
  DataCopyExtParams() = default;
  DataCopyExtParams(uint16_t count, uint32_t len, uint32_t src, uint32_t dst, uint32_t r)
      : blockCount(count), blockLen(len), srcStride(src), dstStride(dst), rsv(r) {}
};

template <typename T>
struct DataCopyPadExtParams {
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue{};
  DataCopyPadExtParams() = default;
  DataCopyPadExtParams(bool pad, uint8_t l, uint8_t r, T v) : isPad(pad), leftPadding(l), rightPadding(r), paddingValue(v) {}
};

namespace detail {
inline void require_aiv(const char* api) {
  if (::twin::core().type != ::twin::CoreType::AIV) {
    ::twin::fail("cube-core-vector-op", ::twin::str(api, " issued on a cube core: the NPU silently skips "
                                                    "vector and GM<->UB instructions there"));
  }
}
// DataCopyPad moves at most 4095 blocks per instruction on A2 (a 12-bit field).
inline void check_block_count(const char* api, uint32_t blockCount) {
  if (blockCount > 4095) {
    ::twin::fail("datacopy-range", ::twin::str(api, ": blockCount ", blockCount, " > 4095 (the A2 limit per copy)"));
  }
}
}  // namespace detail

// GM -> UB, `count` elements; count * sizeof(T) must be a multiple of 32 bytes.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  detail::require_aiv("DataCopy(GM->UB)");
  dst.check_gm_to_ub_position("DataCopy(GM->UB)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  if (bytes % ::twin::kBlockBytes != 0) {
    ::twin::fail("datacopy-align", ::twin::str("DataCopy(GM->UB) of ", count, " x ", ::twin::type_name<T>(), " = ", bytes,
                                               " bytes, not a multiple of 32 (the NPU silently rounds down to ",
                                               bytes / 32 * 32, "); use DataCopyPad"));
  }
  dst.check(count, ::twin::Role::MteIn, "DataCopy(GM->UB)");
  src.check(0, count, false, "DataCopy(GM->UB)");
  src.account(0, bytes, false);
  ::twin::issue(::twin::kPipeMte2, "DataCopy(GM->UB)");
  dst.touch(::twin::kPipeMte2, 0, bytes, true);
  dst.set_defined(0, bytes, true);
  std::memcpy(dst.ptr(), src.raw(), bytes);
}

// UB -> GM, `count` elements.
template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
  ::twin::tick();
  detail::require_aiv("DataCopy(UB->GM)");
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  if (bytes % ::twin::kBlockBytes != 0) {
    ::twin::fail("datacopy-align", ::twin::str("DataCopy(UB->GM) of ", count, " x ", ::twin::type_name<T>(), " = ", bytes,
                                               " bytes, not a multiple of 32 (the NPU silently rounds down to ",
                                               bytes / 32 * 32, "); use DataCopyPad"));
  }
  src.check(count, ::twin::Role::MteOut, "DataCopy(UB->GM)");
  dst.check(0, count, true, "DataCopy(UB->GM)");
  dst.account(0, bytes, true);
  ::twin::issue(::twin::kPipeMte3, "DataCopy(UB->GM)");
  src.touch(::twin::kPipeMte3, 0, bytes, false);
  src.require_defined("DataCopy(UB->GM)", 0, bytes);
  std::memcpy(dst.raw(), src.ptr(), bytes);
}

// GM -> UB strided: blockLen and gaps in 32-byte blocks.
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
  ::twin::tick();
  detail::require_aiv("DataCopy(GM->UB, params)");
  dst.check_gm_to_ub_position("DataCopy(GM->UB, params)");
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sg = p.srcStride * 32ull, dg = p.dstStride * 32ull;
  const uint64_t src_span = p.blockCount * blen + (p.blockCount - 1) * sg;
  const uint64_t dst_span = p.blockCount * blen + (p.blockCount - 1) * dg;
  dst.check((dst_span + sizeof(T) - 1) / sizeof(T), ::twin::Role::MteIn, "DataCopy(GM->UB, params)");
  src.check_span(0, src_span, p.blockCount * blen, false, "DataCopy(GM->UB, params)");
  ::twin::issue(::twin::kPipeMte2, "DataCopy(GM->UB, params)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    src.account(i * (blen + sg), blen, false);
    dst.touch(::twin::kPipeMte2, i * (blen + dg), blen, true);
    dst.set_defined(i * (blen + dg), blen, true);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.ptr()) + i * (blen + dg),
                reinterpret_cast<const uint8_t*>(src.raw()) + i * (blen + sg), blen);
  }
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
  ::twin::tick();
  detail::require_aiv("DataCopy(UB->GM, params)");
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t blen = p.blockLen * 32ull, sg = p.srcStride * 32ull, dg = p.dstStride * 32ull;
  const uint64_t src_span = p.blockCount * blen + (p.blockCount - 1) * sg;
  const uint64_t dst_span = p.blockCount * blen + (p.blockCount - 1) * dg;
  src.check((src_span + sizeof(T) - 1) / sizeof(T), ::twin::Role::MteOut, "DataCopy(UB->GM, params)");
  dst.check_span(0, dst_span, p.blockCount * blen, true, "DataCopy(UB->GM, params)");
  ::twin::issue(::twin::kPipeMte3, "DataCopy(UB->GM, params)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    dst.account(i * (blen + dg), blen, true);
    src.touch(::twin::kPipeMte3, i * (blen + sg), blen, false);
    src.require_defined("DataCopy(UB->GM, params)", i * (blen + sg), blen);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.raw()) + i * (blen + dg),
                reinterpret_cast<const uint8_t*>(src.ptr()) + i * (blen + sg), blen);
  }
}

// GM -> UB, any byte length: blockLen bytes per block, GM gap in bytes, UB gap in 32-byte blocks;
// each block lands 32-byte aligned in UB, the tail of its last 32 bytes is padding.
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                                   const DataCopyPadExtParams<T>& pad) {
  ::twin::tick();
  detail::require_aiv("DataCopyPad(GM->UB)");
  detail::check_block_count("DataCopyPad(GM->UB)", p.blockCount);
  dst.check_gm_to_ub_position("DataCopyPad(GM->UB)");
  if (p.blockCount == 0 || p.blockLen == 0) return;
  if (p.blockLen % sizeof(T) != 0) {
    ::twin::fail("datacopy-align", ::twin::str("DataCopyPad blockLen ", p.blockLen, " bytes is not a multiple of sizeof(",
                                               ::twin::type_name<T>(), ")"));
  }
  if (p.blockLen > 2097151u) ::twin::fail("datacopy-range", ::twin::str("DataCopyPad blockLen ", p.blockLen, " > 2097151"));
  if (pad.leftPadding || pad.rightPadding) {
    ::twin::fail("twin-unmodelled", "DataCopyPad with left/right padding is not modelled by the twin");
  }
  const uint64_t blen = p.blockLen, ub_block = (blen + 31) / 32 * 32, ub_pitch = ub_block + p.dstStride * 32ull;
  const uint64_t gm_pitch = blen + p.srcStride;
  dst.check(((p.blockCount - 1) * ub_pitch + ub_block) / sizeof(T), ::twin::Role::MteIn, "DataCopyPad(GM->UB)");
  src.check_span(0, (p.blockCount - 1) * gm_pitch + blen, p.blockCount * blen, false, "DataCopyPad(GM->UB)");
  auto* d = reinterpret_cast<uint8_t*>(dst.ptr());
  ::twin::issue(::twin::kPipeMte2, "DataCopyPad(GM->UB)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    src.account(i * gm_pitch, blen, false);
    dst.touch(::twin::kPipeMte2, i * ub_pitch, ub_block, true);
    dst.set_defined(i * ub_pitch, blen, true);
    dst.set_defined(i * ub_pitch + blen, ub_block - blen, pad.isPad);  // padding without a value: undefined
    std::memcpy(d + i * ub_pitch, reinterpret_cast<const uint8_t*>(src.raw()) + i * gm_pitch, blen);
    // Padding: the pad value when requested, otherwise "undefined" -> poison (all-ones bytes, a NaN).
    for (uint64_t b = blen; b < ub_block; b += sizeof(T)) {
      if (pad.isPad) std::memcpy(d + i * ub_pitch + b, &pad.paddingValue, sizeof(T));
      else std::memset(d + i * ub_pitch + b, 0xff, sizeof(T));
    }
  }
}

// UB -> GM, any byte length: exactly blockLen bytes per block reach GM; UB gap in 32-byte blocks,
// GM gap in bytes.
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
  ::twin::tick();
  detail::require_aiv("DataCopyPad(UB->GM)");
  detail::check_block_count("DataCopyPad(UB->GM)", p.blockCount);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  if (p.blockLen % sizeof(T) != 0) {
    ::twin::fail("datacopy-align", ::twin::str("DataCopyPad blockLen ", p.blockLen, " bytes is not a multiple of sizeof(",
                                               ::twin::type_name<T>(), ")"));
  }
  if (p.blockLen > 2097151u) ::twin::fail("datacopy-range", ::twin::str("DataCopyPad blockLen ", p.blockLen, " > 2097151"));
  const uint64_t blen = p.blockLen, ub_block = (blen + 31) / 32 * 32, ub_pitch = ub_block + p.srcStride * 32ull;
  const uint64_t gm_pitch = blen + p.dstStride;
  src.check(((p.blockCount - 1) * ub_pitch + ub_block) / sizeof(T), ::twin::Role::MteOut, "DataCopyPad(UB->GM)");
  dst.check_span(0, (p.blockCount - 1) * gm_pitch + blen, p.blockCount * blen, true, "DataCopyPad(UB->GM)");
  const auto* s = reinterpret_cast<const uint8_t*>(src.ptr());
  ::twin::issue(::twin::kPipeMte3, "DataCopyPad(UB->GM)");
  for (uint32_t i = 0; i < p.blockCount; ++i) {
    dst.account(i * gm_pitch, blen, true);
    src.touch(::twin::kPipeMte3, i * ub_pitch, blen, false);
    src.require_defined("DataCopyPad(UB->GM)", i * ub_pitch, blen);
    std::memcpy(reinterpret_cast<uint8_t*>(dst.raw()) + i * gm_pitch, s + i * ub_pitch, blen);
  }
}

// ---- vector arithmetic (count forms) --------------------------------------------------------------
namespace detail {
template <typename T>
constexpr bool vec_arith_type = std::is_same<T, half>::value || std::is_same<T, float>::value ||
                                std::is_same<T, int16_t>::value || std::is_same<T, int32_t>::value;

template <typename D, typename S>
inline void check_overlap(const char* api, const LocalTensor<D>& dst, const LocalTensor<S>& src, int32_t count) {
  const uint64_t d0 = dst.off_, d1 = d0 + static_cast<uint64_t>(count) * sizeof(D);
  const uint64_t s0 = src.off_, s1 = s0 + static_cast<uint64_t>(count) * sizeof(S);
  const bool overlap = d0 < s1 && s0 < d1;
  const bool identical = d0 == s0 && sizeof(D) == sizeof(S);
  if (overlap && !identical) {
    ::twin::fail("vector-overlap", ::twin::str(api, ": dst UB [", d0, ", ", d1, ") partially overlaps src [", s0, ", ", s1,
                                               ")"));
  }
}

template <typename T, typename F>
inline void binary(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                   int32_t count, F f) {
  ::twin::tick();
  require_aiv(api);
  if (count < 0) ::twin::fail("vector-count", ::twin::str(api, ": count ", count, " < 0"));
  if (count == 0) return;
  a.check(count, ::twin::Role::VecRead, api);
  b.check(count, ::twin::Role::VecRead, api);
  dst.check(count, ::twin::Role::VecWrite, api);
  check_overlap(api, dst, a, count);
  check_overlap(api, dst, b, count);
  ::twin::issue(::twin::kPipeV, api);
  a.touch(::twin::kPipeV, 0, count * sizeof(T), false);
  b.touch(::twin::kPipeV, 0, count * sizeof(T), false);
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  T* d = dst.ptr();
  const T* x = a.ptr();
  const T* y = b.ptr();
  uint8_t* dd = dst.defs();
  const uint8_t* ad = a.defs();
  const uint8_t* bd = b.defs();
  for (int32_t i = 0; i < count; ++i) {
    if constexpr (std::is_same<T, float>::value) {
      d[i] = f(x[i], y[i]);
    } else {
      d[i] = ::twin::from_float_rint<T>(f(::twin::to_float(x[i]), ::twin::to_float(y[i])));
    }
    const bool v = ::twin::all_defined(ad + i * sizeof(T), sizeof(T)) && ::twin::all_defined(bd + i * sizeof(T), sizeof(T));
    std::memset(dd + i * sizeof(T), v, sizeof(T));
  }
}
}  // namespace detail

template <typename T>
__aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Add: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Add", dst, src0, src1, count, [](float x, float y) { return x + y; });
}
template <typename T>
__aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Sub: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Sub", dst, src0, src1, count, [](float x, float y) { return x - y; });
}
template <typename T>
__aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                           const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Mul: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  detail::binary("Mul", dst, src0, src1, count, [](float x, float y) { return x * y; });
}
template <typename T>
__aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalar, const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Muls: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  const float s = ::twin::to_float(scalar);
  detail::binary("Muls", dst, src, src, count, [s](float x, float) { return x * s; });
}
template <typename T>
__aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalar, const int32_t& count) {
  static_assert(detail::vec_arith_type<T>, "Adds: A2 vector arithmetic supports half, float, int16_t, int32_t only");
  const float s = ::twin::to_float(scalar);
  detail::binary("Adds", dst, src, src, count, [s](float x, float) { return x + s; });
}

// ---- Cast -----------------------------------------------------------------------------------------
namespace detail {
inline const char* mode_name(RoundMode m) {
  static const char* n[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD", "CAST_HYBRID"};
  return n[static_cast<int>(m)];
}
}  // namespace detail

// dst = src converted with `roundMode`, on A2's legal (type pair, mode) table; anything else is a
// hard error here because the NPU silently leaves dst unchanged.
template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode,
                            const uint32_t count) {
  ::twin::tick();
  detail::require_aiv("Cast");
  if (count == 0) return;
  using M = RoundMode;
  const M m = roundMode;
  bool legal = false;
  constexpr bool up_bf = std::is_same<T, float>::value && std::is_same<U, bfloat16_t>::value;
  constexpr bool up_h = std::is_same<T, float>::value && std::is_same<U, half>::value;
  constexpr bool dn_bf = std::is_same<T, bfloat16_t>::value && std::is_same<U, float>::value;
  constexpr bool dn_h = std::is_same<T, half>::value && std::is_same<U, float>::value;
  if (up_bf || up_h) legal = m == M::CAST_NONE;
  else if (dn_bf) legal = m == M::CAST_RINT || m == M::CAST_FLOOR || m == M::CAST_CEIL || m == M::CAST_ROUND || m == M::CAST_TRUNC;
  else if (dn_h) legal = m != M::CAST_HYBRID;
  if (!legal) {
    ::twin::fail("cast-illegal", ::twin::str("Cast ", ::twin::type_name<U>(), " -> ", ::twin::type_name<T>(), " with ",
                                             detail::mode_name(m), " is not supported on A2 (the NPU silently leaves "
                                             "dst unchanged)"));
  }
  src.check(count, ::twin::Role::VecRead, "Cast");
  dst.check(count, ::twin::Role::VecWrite, "Cast");
  detail::check_overlap("Cast", dst, src, static_cast<int32_t>(count));
  if (sizeof(T) != sizeof(U) && dst.off_ == src.off_) {
    ::twin::fail("vector-overlap", "Cast between types of different width in place");
  }
  ::twin::issue(::twin::kPipeV, "Cast");
  src.touch(::twin::kPipeV, 0, count * sizeof(U), false);
  dst.touch(::twin::kPipeV, 0, count * sizeof(T), true);
  T* d = dst.ptr();
  const U* s = src.ptr();
  {
    uint8_t* dd = dst.defs();
    const uint8_t* sd = src.defs();
    for (uint32_t i = 0; i < count; ++i) std::memset(dd + i * sizeof(T), ::twin::all_defined(sd + i * sizeof(U), sizeof(U)), sizeof(T));
  }
  for (uint32_t i = 0; i < count; ++i) {
    if constexpr (up_bf || up_h) {
      d[i] = ::twin::to_float(s[i]);
    } else if constexpr (dn_bf) {
      switch (m) {
        case M::CAST_RINT: d[i] = ::twin::bf16_rint(s[i]); break;
        case M::CAST_TRUNC: d[i] = ::twin::bf16_trunc(s[i]); break;
        case M::CAST_FLOOR: d[i] = ::twin::bf16_directed(s[i], 0); break;
        case M::CAST_CEIL: d[i] = ::twin::bf16_directed(s[i], 1); break;
        default: d[i] = ::twin::bf16_directed(s[i], 2); break;
      }
    } else if constexpr (dn_h) {
      if (m != M::CAST_RINT && m != M::CAST_NONE) {
        ::twin::fail("twin-unmodelled", ::twin::str("Cast float -> half with ", detail::mode_name(m), " is legal but not modelled"));
      }
      d[i] = ::twin::half_rint(s[i]);
    }
  }
}

}  // namespace AscendC

#include "twin/vec_gather_duplicate.h"

using AscendC::TPosition;
using AscendC::RoundMode;
