#include "cpu_kernel/output_cache.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPageBytes = 4096;

// The size of the block an output of n bytes takes: whole huge pages from 2 MiB, else a multiple
// of kSmallBlockBytes.
size_t block_bytes(size_t n) {
  const size_t unit = n >= kHugePage ? kHugePage : kSmallBlockBytes;
  return (n + unit - 1) / unit * unit;
}

struct Block {
  void* ptr;
  size_t bytes;
};

constexpr size_t kDefaultCacheMb = 512;
constexpr size_t kMaxCacheMb = size_t(1) << 40;  // more is surely a typo (and would overflow)

// NPU_OPS_CPU_OUTPUT_CACHE_MB: a whole number of MiB, 0 or more (unset or empty: the default;
// 0 turns the cache off). False for anything else.
bool parse_cache_mb(const char* v, size_t* bytes) {
  if (v == nullptr || *v == '\0') {
    *bytes = kDefaultCacheMb << 20;
    return true;
  }
  size_t mb = 0;
  for (const char* p = v; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    mb = mb * 10 + static_cast<size_t>(*p - '0');
    if (mb > kMaxCacheMb) return false;
  }
  *bytes = mb << 20;
  return true;
}

// The cache's cap in bytes; an invalid NPU_OPS_CPU_OUTPUT_CACHE_MB is a ValueError.
size_t cache_cap_bytes() {
  const char* v = std::getenv("NPU_OPS_CPU_OUTPUT_CACHE_MB");
  size_t bytes = 0;
  TORCH_CHECK_VALUE(parse_cache_mb(v, &bytes), "NPU_OPS_CPU_OUTPUT_CACHE_MB=\"", v,
                    "\" is not valid: set it to a whole number of MiB from 0 to ", kMaxCacheMb,
                    " (the cap of the CPU kernel's output buffer cache; 0 turns the cache off; unset or "
                    "empty: the default, ", kDefaultCacheMb, ")");
  return bytes;
}

// The same where nothing may throw (a tensor's deleter): an invalid value turns the cache off.
size_t cache_cap_bytes_or_zero() {
  size_t bytes = 0;
  return parse_cache_mb(std::getenv("NPU_OPS_CPU_OUTPUT_CACHE_MB"), &bytes) ? bytes : 0;
}

// The largest total of the output blocks of one call (note_call_outputs) that each fit the cap:
// the cache's floor, at most as many times the cap as a call has outputs (two).
std::atomic<size_t> g_call_floor{0};

// The cap the cache keeps freed buffers under: NPU_OPS_CPU_OUTPUT_CACHE_MB's, raised to the floor
// (0 stays 0: the cache off).
size_t effective_cap(size_t cap) {
  // The floor was recorded under the cap of its time: bounded by twice today's (a cap lowered at
  // run time holds from the next freed buffer on).
  return cap == 0 ? 0 : std::max(cap, std::min(g_call_floor.load(std::memory_order_relaxed), 2 * cap));
}

class Cache {
 public:
  // A block of exactly `bytes` (block_bytes): a cached one, or a new one.
  Block* take(size_t bytes) {
    // (Also reached from the allocator when a returned output is resized, where an invalid
    // setting is not this call's error: empty_output checked it for the op's own calls.)
    if (cache_cap_bytes_or_zero() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if ((*it)->bytes == bytes) {
          Block* b = *it;
          free_.erase(it);
          held_ -= b->bytes;
          return b;
        }
      }
    }
    void* p = nullptr;
    const bool huge = bytes % kHugePage == 0;
    if (posix_memalign(&p, huge ? kHugePage : kPageBytes, bytes) != 0 || p == nullptr) {
      TORCH_CHECK(false, "rope_matrix: out of memory allocating ", bytes, " bytes for the output");
    }
#ifdef __linux__
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);  // advice only; ignored where THP is off
#endif
    return new Block{p, bytes};
  }

  void give_back(Block* b) {
    // A block is kept if it fits the cap by itself; the blocks kept are evicted down to the cap
    // raised to the floor (several outputs of one call).
    const size_t cap = cache_cap_bytes_or_zero();
    const size_t keep = effective_cap(cap);
    std::list<Block*> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (b->bytes <= cap) {
        free_.push_front(b);
        held_ += b->bytes;
        b = nullptr;
      }
      while (held_ > keep && !free_.empty()) {
        evicted.push_back(free_.back());
        held_ -= free_.back()->bytes;
        free_.pop_back();
      }
    }
    if (b != nullptr) evicted.push_back(b);
    for (Block* e : evicted) {
      std::free(e->ptr);
      delete e;
    }
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  std::mutex mu_;
  std::list<Block*> free_;  // most recently freed first
  size_t held_ = 0;
};

// Never destroyed: a tensor may outlive static destruction at exit and still free its buffer.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

void release(void* ctx) { cache().give_back(static_cast<Block*>(ctx)); }

struct OutputAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n < kOutputCacheMinBytes) return c10::GetCPUAllocator()->allocate(n);
    Block* b = cache().take(block_bytes(n));
    return {b->ptr, b, &release, c10::Device(c10::DeviceType::CPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

OutputAllocator& allocator() {
  static OutputAllocator* a = new OutputAllocator();
  return *a;
}

}  // namespace

void check_output_cache_env() { (void)cache_cap_bytes(); }

at::Tensor empty_output(at::IntArrayRef sizes, at::ScalarType dtype) {
  check_output_cache_env();  // an invalid NPU_OPS_CPU_OUTPUT_CACHE_MB is an error on every call
  return at::detail::empty_generic(sizes, &allocator(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   dtype, at::MemoryFormat::Contiguous);
}

void note_call_outputs(c10::ArrayRef<size_t> bytes) {
  const size_t cap = cache_cap_bytes_or_zero();
  size_t total = 0;
  for (const size_t n : bytes) {
    // Only blocks the cache may keep (each within the cap) count: a single output larger than the
    // cap is never kept, and must not make room for others.
    if (n >= kOutputCacheMinBytes && block_bytes(n) <= cap) total += block_bytes(n);
  }
  size_t cur = g_call_floor.load(std::memory_order_relaxed);
  while (total > cur && !g_call_floor.compare_exchange_weak(cur, total, std::memory_order_relaxed)) {
  }
}

size_t output_cache_bytes() { return cache().held(); }

}  // namespace cpu
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_FRAGMENT(npu_ops_transformer_ext, m) {
  // Diagnostic for tests: bytes of freed output buffers the CPU kernel's cache holds. Not part of
  // the operator contract.
  m.def("_cpu_output_cache_bytes() -> int",
        []() -> int64_t { return static_cast<int64_t>(npu_ops_transformer_ext::cpu::output_cache_bytes()); });
}
