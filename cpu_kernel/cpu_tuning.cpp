// The CPU kernel's choices tuned per CPU (cpu_tuning.h). Every choice gives the same bits: only
// the order in which rows are visited and the kind of store change.
#include "cpu_kernel/cpu_tuning.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <cpuid.h>
#define NPU_OPS_HAVE_CPUID 1
#endif

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

// Measured on a 2-core AMD Zen 5 (the development machine until git de8257d): x [1, 24, S, 128],
// 2 threads. BNSD batches, 16-bit x: at S = 32768 bf16 and fp16 were 1.11 and 1.18-1.19x the memory
// limit with two heads against 1.19-1.23 and 1.25-1.26 with four (two sweep runs each); in cache,
// with the op's variants and the limit timed round-robin in one process, bf16 half S = 256 32.3 us
// against 38.9 / 37.6 / 37.0 / 35.6 / 33.6 with 1 / 3 / 4 / 6 / 24 heads, S = 1024 102.8 against
// 132.0 / 116.5 / 119.0 / 117.4 / 108.3 (half mode in fp16 alike; in 3D, 24 heads came out from
// 7 % faster to 8 % slower than two). fp32 x, the op with four and with two heads and the limit
// round-robin in one process, ratio to the limit, half mode: S = 4096 1.071 / 1.016, S = 8192
// 1.083-1.111 / 1.063 (3D 1.119 / 1.064), S = 16384 1.136 / 1.107; but S = 20480 (10 MiB a head)
// 1.033 / 1.063, S = 32768 1.055 / 1.095; in cache four (S = 256 half 54 / 55 us, S = 1024 3D 284
// / 291 us). Blocks of 1024 rows gave fp32 x nothing there. (Apart heads whose rows span a
// multiple of 4 KiB put row r of every head in the same L1 sets: more heads a batch evict their own
// lines; a standalone bf16 half loop at x [1, 24, 1024, 128], one thread: 24 heads 8.7 ns a row, 4
// heads 6.8, 2 heads 6.3, 24 heads with the head stride padded by 320 bytes 5.9.) BSND stores,
// calls back to back, three-way alternation with the limit, non-temporal against ordinary stores:
// one thread fp32 half 8.2 MiB 207 / 184 us, 10 MiB 253 / 250, 12 MiB 310 / 388, bf16 half 12 MiB
// 313 / 351; two threads keep ordinary stores below 16 MiB: bf16 half at 12 MiB 299 against
// 193 us, fp32 half at 10 MiB 165 against 131. Also the tuning for every CPU not measured.
constexpr CpuTuning kDefault{"default", 2, 4, 2, 4, false, 16 << 20, 10 << 20};

// Measured on a 2-core AMD EPYC of family 19h (Zen 4: 512-bit operations in two halves, 32 KiB
// 8-way L1d), x [1, 24, S, 128] BNSD, the op with each shape and the limit timed round-robin in one
// process (ratio to the limit, medians). Heads a batch, bf16 half S = 16384, 2 / 3 / 4 / 6 / 8
// heads: one thread 1.16 / 0.97 / 1.01 / 1.17 / 1.24, two threads 1.04 / 0.95 / 1.01 / 1.15 /
// 1.23; in cache S = 1024 1.69 / 1.62 / 1.67 / - / 1.70 and 1.65 / 1.57 / 1.57 / - / 1.66; fp32 in
// cache (S = 256) 2 / 3 / 4 heads 1.59 / 1.41 / 1.40 (one thread), 1.75 / 1.56 / 1.45 (two). fp32
// streamed with three heads, blocks of 128 / 512 / 2048 rows: S = 16384, one thread 1.24 / 1.16 /
// 1.13. This shape against kDefault's (default -> this), half mode: one thread bf16 S = 256 2.06 ->
// 2.02, 1024 1.77 -> 1.70, 16384 1.04 -> 0.95, 32768 1.09 -> 0.99; fp16 1024 2.06 -> 1.83, 4096
// 1.15 -> 0.99, 32768 1.12 -> 1.04; fp32 4096 1.23 -> 1.06, 16384 1.28 -> 1.06 (3D 1.31 -> 0.97),
// 32768 1.22 -> 1.08; two threads bf16 1024 1.73 -> 1.64, 16384 0.99 -> 0.94; fp16 1024 1.48 ->
// 1.37, 32768 1.02 -> 0.92; fp32 4096 1.18 -> 1.07, 16384 1.08 -> 0.98, 32768 1.05 -> 0.99; of 60
// cells (S = 256 ... 32768, three dtypes, half and 3D, one and two threads) none more than 1.2 %
// slower. BSND stores from 12 MiB (8 MiB on one thread) as BNSD's, against kDefault's 16 (10) MiB,
// x [1, S, 24, 128], same method (kDefault's -> these): one thread at 9 MiB bf16 half 1.25 ->
// 0.90, 3D 1.33 -> 1.06, fp16 half 1.21 -> 0.85, fp32 half 1.47 -> 0.92; two threads at 15 MiB bf16
// half 1.02 -> 0.98, 3D 1.03 -> 0.98, fp16 half 1.03 -> 0.97, fp32 half 1.27 -> 1.11; at 12 MiB from
// 0.79x (fp32 half) to 1.11x (fp32 3D) the time, 0.82-0.96x in seven more round-robin runs of bf16
// and fp16; 6-9 MiB on two threads and 6 MiB on one stay faster with ordinary stores (bf16 half 9
// MiB 1.51 against 1.54, fp32 6 MiB 1.22 against 1.28).
constexpr CpuTuning kZen4{"amd-family-19h", 3, 4, 3, 3, true, 12 << 20, 8 << 20};

bool is_amd_family_19h_with_avx512() {
#if defined(NPU_OPS_HAVE_CPUID)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
  if (!amd || __get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  unsigned family = (a >> 8) & 0xfu;
  if (family == 0xfu) family += (a >> 20) & 0xffu;
  // Family 19h is Zen 3 and Zen 4; only Zen 4 has AVX-512.
  return family == 0x19u && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

}  // namespace

const CpuTuning& cpu_tuning() {
  static const CpuTuning& tuning = is_amd_family_19h_with_avx512() ? kZen4 : kDefault;
  return tuning;
}

}  // namespace cpu
}  // namespace npu_ops_transformer_ext
