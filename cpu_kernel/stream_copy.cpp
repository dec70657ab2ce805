// The memory limit the benchmarks measure the operator against: a native copy of x into out, with
// the tables read once, on the same threads as the operator.
//
//   torch.ops.npu_ops_transformer_ext._stream_copy([x], [out], [sin, cos], nontemporal=True)
//   [out] = torch.ops.npu_ops_transformer_ext._stream_copy_new([x], [sin, cos], nontemporal=True)
//
// It moves exactly the bytes a rope_matrix call must move (x read, the output written, each table
// read once) and does nothing else, so "rope_matrix time / _stream_copy time" is how far the
// operator is from what this machine allows. The copy runs on at::get_num_threads() threads with
// the same small-call rule as the operator (calls under kMinParallelElems elements stay on the
// calling thread). nontemporal=True writes out with streaming (non-temporal) stores, the fastest way
// to write memory that will not be read back soon (no read-for-ownership of each output line);
// nontemporal=False uses ordinary stores (memcpy), faster when the output fits in cache. The
// benchmarks take the faster of the two at each size: the ordinary copy into a new output allocated
// as rope_matrix's own (_stream_copy_new), the streaming one into outputs of its own (_stream_copy),
// whose lines it evicts without touching the buffer the operator's calls reuse. Private benchmark
// helpers, not part of the operator contract.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_kernel/output_cache.h"
#include "cpu_kernel/parallel_rule.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define NPU_OPS_STREAM_X86 1
#endif

namespace npu_ops_transformer_ext {
namespace cpu {
namespace {

// Work item: 64 KiB of output (a multiple of 64 bytes, so items start on a cache line of out).
constexpr int64_t kChunk = 64 * 1024;

#ifdef NPU_OPS_STREAM_X86
__attribute__((target("avx512f"))) void stream_avx512(const char* src, char* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    const __m512i a = _mm512_loadu_si512(src + i);
    const __m512i b = _mm512_loadu_si512(src + i + 64);
    const __m512i c = _mm512_loadu_si512(src + i + 128);
    const __m512i d = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), d);
  }
  for (; i + 64 <= n; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  }
  if (i < n) std::memcpy(dst + i, src + i, static_cast<size_t>(n - i));
}

__attribute__((target("avx2"))) void stream_avx2(const char* src, char* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  if (i < n) std::memcpy(dst + i, src + i, static_cast<size_t>(n - i));
}

void stream_sse2(const char* src, char* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  if (i < n) std::memcpy(dst + i, src + i, static_cast<size_t>(n - i));
}

__attribute__((target("avx2"))) uint64_t read_avx2(const char* p, int64_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm256_or_si256(acc0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_or_si256(acc1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  acc0 = _mm256_or_si256(acc0, acc1);
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc0);
  uint64_t r = lanes[0] | lanes[1] | lanes[2] | lanes[3];
  for (; i < n; ++i) r |= static_cast<unsigned char>(p[i]);
  return r;
}
#endif

// Copies n bytes with streaming stores where the CPU has them: ordinary stores up to the first
// 64-byte boundary of dst, streaming stores after it.
void stream_bytes(const char* src, char* dst, int64_t n) {
#ifdef NPU_OPS_STREAM_X86
  const int64_t head = std::min<int64_t>(n, (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63);
  if (head > 0) std::memcpy(dst, src, static_cast<size_t>(head));
  src += head;
  dst += head;
  n -= head;
  static const int isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  if (isa == 2) {
    stream_avx512(src, dst, n);
  } else if (isa == 1) {
    stream_avx2(src, dst, n);
  } else {
    stream_sse2(src, dst, n);
  }
  _mm_sfence();
#else
  std::memcpy(dst, src, static_cast<size_t>(n));
#endif
}

uint64_t read_bytes(const char* p, int64_t n) {
#ifdef NPU_OPS_STREAM_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return read_avx2(p, n);
#endif
  uint64_t r = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    r |= v;
  }
  for (; i < n; ++i) r |= static_cast<unsigned char>(p[i]);
  return r;
}

volatile uint64_t g_sink = 0;  // keeps the table reads from being optimised away

// One copy of the limit: n bytes from src to dst (dst == nullptr: n bytes of a table to read).
struct CopyJob {
  const char* src;
  char* dst;
  int64_t n;
};

// Copies every job and reads each table once, all in one parallel region on torch's threads (as
// one rope_matrix or rope_matrix_qk call runs). Work items: output chunks of kChunk bytes (from each
// dst's first 64-byte boundary), then table chunks.
void copy_jobs(const std::vector<CopyJob>& jobs, at::TensorList tables, bool nontemporal, int64_t numel) {
  std::vector<at::Tensor> tabs;
  for (const at::Tensor& t : tables) tabs.push_back(t.contiguous());
  std::vector<CopyJob> items;
  for (const CopyJob& j : jobs) {
    if (j.n == 0) continue;
    const int64_t lead = std::min<int64_t>(j.n, (64 - (reinterpret_cast<uintptr_t>(j.dst) & 63)) & 63);
    for (int64_t o = 0; o < j.n;) {
      const int64_t e = std::min(j.n, o == 0 ? lead + kChunk : o + kChunk);  // later chunks start on a line
      items.push_back({j.src + o, j.dst + o, e - o});
      o = e;
    }
  }
  for (const at::Tensor& t : tabs) {
    const auto* p = static_cast<const char*>(t.const_data_ptr());
    const int64_t tn = static_cast<int64_t>(t.nbytes());
    for (int64_t o = 0; o < tn; o += kChunk) items.push_back({p + o, nullptr, std::min(kChunk, tn - o)});
  }
  const auto count = static_cast<int64_t>(items.size());
  if (count == 0) return;
  const int64_t grain = numel < kMinParallelElems ? count : 1;
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    uint64_t acc = 0;
    for (int64_t i = begin; i < end; ++i) {
      const CopyJob& it = items[static_cast<size_t>(i)];
      if (it.dst == nullptr) {
        acc |= read_bytes(it.src, it.n);
      } else if (nontemporal) {
        stream_bytes(it.src, it.dst, it.n);
      } else {
        std::memcpy(it.dst, it.src, static_cast<size_t>(it.n));
      }
    }
    if (acc == 0x5a5a5a5a5a5a5a5aull) g_sink = acc;
  });
}

// Each of xs into the out of the same index, in one parallel region, the tables read once.
void stream_copy(at::TensorList xs, at::TensorList outs, at::TensorList tables, bool nontemporal) {
  TORCH_CHECK(xs.size() == outs.size(), "_stream_copy: one out per x, got ", outs.size(), " and ", xs.size());
  std::vector<CopyJob> jobs;
  int64_t numel = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const at::Tensor& x = xs[i];
    const at::Tensor& out = outs[i];
    TORCH_CHECK(x.device().is_cpu() && out.device().is_cpu(), "_stream_copy: x and out must be CPU tensors");
    TORCH_CHECK(x.is_contiguous() && out.is_contiguous(), "_stream_copy: x and out must be contiguous");
    TORCH_CHECK(x.nbytes() == out.nbytes(), "_stream_copy: out must have as many bytes as x, got ",
                out.nbytes(), " and ", x.nbytes());
    jobs.push_back({static_cast<const char*>(x.const_data_ptr()), static_cast<char*>(out.data_ptr()),
                    static_cast<int64_t>(x.nbytes())});
    numel += x.numel();
  }
  copy_jobs(jobs, tables, nontemporal, numel);
}

// The same copy of each of xs into a new output allocated as rope_matrix allocates its own
// (empty_output: from the output buffer cache from kOutputCacheMinBytes on), so that the limit and
// the operator write equally warm memory (a preallocated output of the limit's own was colder in
// cache than the one buffer every rope_matrix call of a round reuses, and the operator came out
// faster than its limit), in one parallel region, the tables read once: with [q, k], the limit of
// rope_matrix_qk, which also writes two new outputs.
std::vector<at::Tensor> stream_copy_new(at::TensorList xs, at::TensorList tables, bool nontemporal) {
  std::vector<at::Tensor> srcs, outs;
  std::vector<size_t> out_bytes;
  for (const at::Tensor& x : xs) {
    TORCH_CHECK(x.device().is_cpu(), "_stream_copy_new: every x must be a CPU tensor");
    srcs.push_back(x.contiguous());
    out_bytes.push_back(srcs.back().nbytes());
  }
  note_call_outputs(out_bytes);  // as rope_matrix_qk notes its two outputs
  for (const at::Tensor& src : srcs) outs.push_back(empty_output(src.sizes(), src.scalar_type()));
  stream_copy(srcs, outs, tables, nontemporal);
  return outs;
}

}  // namespace
}  // namespace cpu
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_FRAGMENT(npu_ops_transformer_ext, m) {
  // Benchmark helper (see above): outs[i] <- xs[i] with the tables read once; not part of the contract.
  m.def("_stream_copy(Tensor[] xs, Tensor(a!)[] outs, Tensor[] tables, bool nontemporal=True) -> ()");
  // The same into a new output allocated as rope_matrix allocates its own (the limit the benchmarks use).
  m.def("_stream_copy_new(Tensor[] xs, Tensor[] tables, bool nontemporal=True) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, CPU, m) {
  m.impl("_stream_copy", &npu_ops_transformer_ext::cpu::stream_copy);
  m.impl("_stream_copy_new", &npu_ops_transformer_ext::cpu::stream_copy_new);
}
