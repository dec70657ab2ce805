// The small-call rule the operator (rope_matrix_cpu.cpp) and its memory-limit copy
// (stream_copy.cpp) share, so the copy a benchmark compares against runs on the same threads.
#pragma once

#include <cstdint>

namespace npu_ops_transformer_ext {
namespace cpu {

// Calls with fewer elements run on the calling thread. One decode token of 32 heads of 128 is 4096
// elements: waking the second thread cost about 1 us more than it saved there. Once a call on one
// thread got cheaper (2.5 us at 4096 elements, 5.6 us at 32768), two threads lost to one at 32768
// and 98304 elements (speedup 0.71-0.82) and broke even at 196608, on the 2-core development
// machine while other jobs ran (load average 6-7); 65536 keeps 8 decode tokens on one thread.
constexpr int64_t kMinParallelElems = 64 * 1024;

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
