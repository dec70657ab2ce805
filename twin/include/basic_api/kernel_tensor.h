// The twin's GlobalTensor and LocalTensor (asc-devkit kernel_tensor.h). A LocalTensor is a view of one
// buffer of the core's TPipe; its operand, position and initcheck rules live in twin/ub.h.
#pragma once

#include <cstring>

#include "basic_api/kernel_type.h"
#include "twin/types.h"
#include "twin/gm.h"
#include "twin/pipe_order.h"
#include "twin/ub.h"

namespace AscendC {

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
  void check_span(uint64_t byte_first, uint64_t span, uint64_t /*moved*/, bool write, const char* api) const {
    ::twin::check_gm_span(region_, reinterpret_cast<const uint8_t*>(ptr_) + byte_first, sized_, (off_)*sizeof(T) + byte_first,
                          size_ * sizeof(T), size_, sizeof(T), ::twin::type_name<T>(), span, write, api);
  }
  void account(uint64_t byte_first, uint64_t bytes, bool write) const {
    auto& l = ::twin::launch();
    const auto& r = l.region(region_);
    const uint64_t off = reinterpret_cast<const uint8_t*>(ptr_) + byte_first - r.base;
    l.record_gm(region_, write, off, bytes);
  }
  // A write of `bytes` bytes from `byte_first` past ptr_ by the current MTE3 instruction (same-pipe rule).
  void mte3_write(uint64_t byte_first, uint64_t bytes) const {
    const auto& r = ::twin::launch().region(region_);
    ::twin::mte3_gm_write(region_, reinterpret_cast<const uint8_t*>(ptr_) + byte_first - r.base, bytes);
  }
  T* raw() const { return ptr_; }
  int region() const { return region_; }

 private:
  void set(T* buffer, uint64_t n, bool sized) {
    ::twin::tick();
    region_ = ::twin::register_global_buffer(buffer, n * sizeof(T), n, sized);
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
    if (pipe == ::twin::kPipeMte2 && write) ::twin::check_mte2_ub_overlap(off_ + byte_first, bytes);
    ::twin::core().pipes.access(pipe, off_ + byte_first, bytes, write);
  }
  // UB initcheck shadow (one byte per UB byte) of this tensor's first byte.
  uint8_t* defs() const { return ::twin::core().ub_def.data() + off_; }
  void set_defined(uint64_t byte_first, uint64_t bytes, bool v) const { std::memset(defs() + byte_first, v ? 1 : 0, bytes); }
  void require_defined(const char* api, uint64_t byte_first, uint64_t bytes) const {
    ::twin::require_defined(api, off_ + byte_first, bytes);
  }
  void check_gm_to_ub_position(const char* api) const { ::twin::check_mte2_target(buf_, api); }
  // Validates this tensor as an operand of `count` elements starting at element `first`.
  void check(uint64_t count, ::twin::Role role, const char* api, uint64_t first = 0, bool need_align = true) const {
    ::twin::check_operand(buf_, gen_, off_, (first + count) * sizeof(T), ::twin::type_name<T>(), first + count, role, api,
                          need_align);
  }
  int buf_ = -1;
  uint32_t gen_ = 0;
  uint32_t off_ = 0;  // byte offset in UB
  uint32_t len_ = 0;  // elements
};

}  // namespace AscendC
