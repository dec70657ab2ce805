// Where the CPU kernel's large outputs come from: a small cache of recently freed output buffers.
//
// A freshly allocated large tensor is memory the kernel touches for the first time: the operating
// system must map and zero every page on that first touch, which for a [1, 24, 8192, 128] bf16
// output costs more than the whole RoPE computation. RoPE runs once per attention layer with the
// same shapes, and its outputs die within the layer, so the next call can reuse a buffer whose
// pages are already mapped. This allocator keeps freed output buffers of at least kMinBytes in a
// least-recently-used cache capped at NPU_OPS_CPU_OUTPUT_CACHE_MB MiB (default 512; 0 turns the
// cache off) and asks for transparent huge pages for each new buffer where the OS allows (one page
// fault per 2 MiB instead of 512). Buffers are
// only ever handed out whole and the kernel writes every element of its output, so a reused buffer
// never shows old values.
#pragma once

#include <ATen/ATen.h>

namespace npu_ops_transformer_ext {
namespace cpu {

// Buffers smaller than this come from torch's ordinary CPU allocator.
constexpr size_t kOutputCacheMinBytes = size_t(4) << 20;

// A new contiguous tensor of `sizes` and `dtype` on the CPU whose storage comes from the cache.
at::Tensor empty_output(at::IntArrayRef sizes, at::ScalarType dtype);

// Bytes currently held by the cache (freed buffers waiting for reuse).
size_t output_cache_bytes();

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
