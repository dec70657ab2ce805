// The choices of the CPU kernel that are tuned per CPU, chosen once per process for the CPU it runs
// on: how many heads a batch takes when the heads lie apart in x (BNSD), how long a streamed call's
// blocks are, and from which output size a call whose heads are adjacent rows (BSND) streams its
// output. rope_matrix_cpu.cpp uses them; every choice gives the same bits.
#pragma once

#include <cstdint>

namespace npu_ops_transformer_ext {
namespace cpu {

// A head's rows (S * D * element bytes) up to this many bytes are "short" for
// CpuTuning::heads_wide_streamed.
constexpr int64_t kShortHeadBytes = 8 << 20;

struct CpuTuning {
  const char* name;                  // the CPU family it was measured on, or "default"
  int64_t heads_16;                  // BNSD heads a batch, 16-bit x
  int64_t heads_wide_cached;         // fp32 and fp64 x whose output is not streamed
  int64_t heads_wide_streamed;       // ... streamed, heads of up to kShortHeadBytes
  int64_t heads_wide_streamed_long;  // ... streamed, longer heads
  // Streamed fp32 and fp64 BNSD x take blocks of as many table rows as streamed 16-bit x do (the
  // run of a head's rows in a block is then longer), not blocks sized for L2.
  bool wide_streamed_long_blocks;
  // Outputs of calls whose heads are adjacent rows (BSND) are streamed from this many bytes (two
  // threads or more; one thread). (Heads apart: rope_matrix_cpu.cpp, kStreamBytesApart.)
  int64_t stream_bytes_adjacent;
  int64_t stream_bytes_adjacent_one_thread;
};

// The tuning for this CPU (AMD family 19h with AVX-512, i.e. Zen 4, or the default).
const CpuTuning& cpu_tuning();

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
