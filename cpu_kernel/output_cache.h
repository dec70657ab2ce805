// Where the CPU kernel's large outputs come from: a small cache of recently freed output buffers.
//
// A freshly allocated large tensor is memory the kernel touches for the first time: the operating
// system must map and zero every page on that first touch, which for a [1, 24, 8192, 128] bf16
// output costs more than the whole RoPE computation. RoPE runs once per attention layer with the
// same shapes, and its outputs die within the layer, so the next call can reuse a buffer whose
// pages are already mapped. This allocator keeps freed output buffers of at least
// kOutputCacheMinBytes in a least-recently-used cache capped at NPU_OPS_CPU_OUTPUT_CACHE_MB MiB
// (default 512; 0 turns the cache off), or at the outputs of the largest single call if more
// (note_call_outputs; a single output larger than the cap is never kept). Buffers of 2 MiB and
// more are whole transparent huge pages where the OS allows (one page fault per 2 MiB instead of
// 512); smaller ones are rounded up to kSmallBlockBytes. Buffers are only ever handed out whole
// and the kernel writes every element of its output, so a reused buffer never shows old values.
//
// Mid-sized outputs need the cache too: the C library's malloc gives memory back to the OS when
// enough of it is free at the top of its heap (and maps large chunks afresh each time), so a call
// whose outputs are a few MiB may fault in all their pages again on every call, depending on what
// the process allocated before. Measured on the 2-core Zen 5 development machine (x [1, 24, S, 128],
// 2 threads, a sweep's sequence of calls): rope_matrix_qk's limit with two 3 MiB outputs took
// 1.15 ms a call instead of 0.062 (about 770 page faults a call), and rope_matrix_qk itself
// 0.19-0.22 ms instead of 0.125; in a fresh process rope_matrix_qk with outputs of 1-3 MiB each
// took 5-15 faults a call.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>

namespace npu_ops_transformer_ext {
namespace cpu {

// Buffers smaller than this come from torch's ordinary CPU allocator (the heap serves such
// sizes from memory it keeps).
constexpr size_t kOutputCacheMinBytes = size_t(256) << 10;
// Buffers under 2 MiB are rounded up to a multiple of this (not to a huge page: a 256 KiB output
// would otherwise hold 2 MiB).
constexpr size_t kSmallBlockBytes = size_t(64) << 10;

// A new contiguous tensor of `sizes` and `dtype` on the CPU whose storage comes from the cache.
at::Tensor empty_output(at::IntArrayRef sizes, at::ScalarType dtype);

// Raises the ValueError of an invalid NPU_OPS_CPU_OUTPUT_CACHE_MB (empty_output does too), so that
// every call of every op refuses it, also the in-place one, which allocates no output.
void check_output_cache_env();

// The sizes in bytes of the outputs one call is about to allocate with empty_output. From now on
// the cache keeps up to their blocks' total of freed buffers, even above NPU_OPS_CPU_OUTPUT_CACHE_MB
// (counting only blocks that each fit the cap, which alone are ever kept; never when the cap is 0):
// a call whose outputs together exceed the cap (rope_matrix_qk's q and k outputs) then reuses every
// one of them, instead of mapping some afresh each time. The cache so holds at most twice the
// cap. Measured on the 2-core Zen 5 development machine, fp32 q and k [1, 24, 32768, 128] (two 384 MiB
// outputs), 2 threads: 42.5 ms a call under the default 512 MiB cap without this floor (1.50x the
// limit), 28.8-29.9 ms with it (1.04-1.06x).
void note_call_outputs(c10::ArrayRef<size_t> bytes);

// Bytes currently held by the cache (freed buffers waiting for reuse).
size_t output_cache_bytes();

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
