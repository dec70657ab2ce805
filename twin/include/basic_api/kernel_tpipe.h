// The twin's TPipe, TQue and TBuf (asc-devkit kernel_tpipe.h): UB carved by a bump allocator, queue
// buffers as the FREE -> OCCUPIED -> ENQUE -> DEQUE state machine with the hardware events a TQue
// implies (twin/ub.h, twin/hazard.h).
#pragma once

#include <deque>
#include <vector>

#include "basic_api/kernel_tensor.h"

namespace AscendC {

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

}  // namespace AscendC
