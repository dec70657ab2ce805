// How many heads a batch of the CPU kernel takes when the heads lie apart in x (BNSD), and how long
// a streamed call's blocks are, chosen once per process for the CPU it runs on (rope_matrix_cpu.cpp
// groups a block's rows into batches; see there).
#pragma once

#include <cstdint>

namespace npu_ops_transformer_ext {
namespace cpu {

// A head's rows (S * D * element bytes) up to this many bytes are "short" for
// BnsdShape::heads_wide_streamed.
constexpr int64_t kShortHeadBytes = 8 << 20;

struct BnsdShape {
  const char* name;                  // the CPU family it was measured on, or "default"
  int64_t heads_16;                  // heads a batch, 16-bit x
  int64_t heads_wide_cached;         // fp32 and fp64 x whose output is not streamed
  int64_t heads_wide_streamed;       // ... streamed, heads of up to kShortHeadBytes
  int64_t heads_wide_streamed_long;  // ... streamed, longer heads
  // Streamed fp32 and fp64 x take blocks of as many table rows as streamed 16-bit x do (the run of
  // a head's rows in a block is then longer), not blocks sized for L2.
  bool wide_streamed_long_blocks;
};

// The shape for this CPU (AMD family 19h with AVX-512, i.e. Zen 4, or the default).
const BnsdShape& bnsd_shape();

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
