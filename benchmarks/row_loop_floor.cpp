// The arithmetic floor of the CPU kernel at cache-resident sizes: a standalone loop of the bf16
// half-rotation row (the op's arithmetic and rounding, nothing else: no validation, no plan, no
// batches, no exact-path fallback) against a memcpy of the same bytes, on the same threads.
//
//   bash benchmarks/row_loop_floor.sh            # builds with g++ -O3 -march=native -fopenmp, runs
//   benchmarks/row_loop_floor S THREADS HEADS_PER_BATCH [ROUNDS]
//
// x is [1, 24, S, 128] bf16, tables [S, 128] bf16, read as they are and converted in registers. Each
// thread takes a contiguous range of the table rows. Layouts:
//   bsnd      the 24 heads of a table row are adjacent rows of x (one table row per 24 x rows);
//   bnsd/H    x [1, 24, S, 128]: H heads a batch, a table row loaded for H rows of x, the H heads' rows
//             walked in turn (as the op's BNSD batches), blocks of 64 table rows;
//   bnsd-cp   the same walk (each head's run of a block's rows, head after head) as memcpy: what
//             BNSD's memory order alone costs;
//   bnsd-t1   bnsd/H with every row reading the tables' first row (the same arithmetic, the table
//             loads always from L1; the results are not RoPE): what reading a table row per H rows
//             costs.
// Prints the median and minimum time of each, and their ratios to the memcpy, timed round-robin.
// Needs AVX512_BF16 (prints a note and exits 0 without it).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kD = 128, kHeads = 24, kBlockRows = 64;

__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline __m512 load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

// Rows of hn heads for table rows [r0, r1): head h's row r at x + xh[h] + r * rs, table row r at
// ct + r * ts (ts = 0: the first row for all). Returns the lanes whose rounding the op would redo
// on its exact path (subnormal or NaN results), so that the check is paid for as in the op.
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) uint32_t rows(
    const uint16_t* x, uint16_t* out, const int64_t* xh, int hn, int64_t rs, const uint16_t* ct, const uint16_t* st,
    int64_t ts, int64_t r0, int64_t r1) {
  uint32_t fix = 0;
  for (int64_t r = r0; r < r1; ++r) {
    __m512 c[8], s[8];
    for (int i = 0; i < 8; ++i) {
      c[i] = load_bf16(ct + r * ts + 16 * i);
      s[i] = load_bf16(st + r * ts + 16 * i);
    }
    for (int h = 0; h < hn; ++h) {
      const uint16_t* xr = x + xh[h] + r * rs;
      uint16_t* o = out + xh[h] + r * rs;
      __m512 v[8], res[8];
      for (int i = 0; i < 8; ++i) v[i] = load_bf16(xr + 16 * i);
      __mmask16 f = 0;
      for (int i = 0; i < 8; ++i) {
        res[i] = _mm512_add_ps(_mm512_mul_ps(v[i], c[i]), _mm512_mul_ps(v[(i + 4) % 8], s[i]));
        f |= _mm512_fpclass_ps_mask(res[i], 0xA1);
      }
      for (int i = 0; i < 8; i += 2) _mm512_storeu_si512(o + 16 * i, (__m512i)_mm512_cvtne2ps_pbh(res[i + 1], res[i]));
      fix |= f;
    }
  }
  return fix;
}

volatile uint32_t g_sink = 0;  // keeps the rows' results live

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s S THREADS HEADS_PER_BATCH [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int64_t S = std::atoll(argv[1]);
  const int threads = std::atoi(argv[2]), hb = std::atoi(argv[3]);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 2000;
  if (S < 1 || threads < 1 || hb < 1 || kHeads % hb != 0 || rounds < 1) {
    std::fprintf(stderr, "S, THREADS, ROUNDS >= 1; HEADS_PER_BATCH must divide %d\n", kHeads);
    return 2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("this CPU has no AVX512_BF16: nothing measured\n");
    return 0;
  }
  const size_t n = static_cast<size_t>(kHeads) * S * kD;
  // Page-aligned buffers (aligned_alloc wants a size that is a multiple of the alignment).
  const auto alloc = [](size_t bytes) { return static_cast<uint16_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)); };
  uint16_t* x = alloc(n * 2);
  uint16_t* out = alloc(n * 2);
  uint16_t* ct = alloc(S * kD * 2);
  uint16_t* st = alloc(S * kD * 2);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<uint16_t>(0x3f80 + i % 100);  // 1.0 .. 1.8
  for (int64_t i = 0; i < S * kD; ++i) {
    ct[i] = static_cast<uint16_t>(0x3f00 + i % 7);
    st[i] = 0x3e80;
  }
  std::memset(out, 0, n * 2);
  omp_set_num_threads(threads);

  std::vector<int64_t> bsnd_off(kHeads), bnsd_off(kHeads);
  for (int h = 0; h < kHeads; ++h) {
    bsnd_off[h] = h * kD;      // [S, 24, 128]
    bnsd_off[h] = h * S * kD;  // [24, S, 128]
  }
  constexpr int kN = 5;
  const char* names[kN] = {"memcpy", "bsnd", "bnsd", "bnsd-cp", "bnsd-t1"};
  std::vector<double> t[kN];
  uint32_t sink = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < kN; ++k) {
      const int which = (round + k) % kN;
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(| : sink)
      {
        const int th = omp_get_thread_num();
        const int64_t a = S * th / threads, b = S * (th + 1) / threads;
        if (which == 0) {
          // The bytes of this thread's table rows in both layouts' memory order.
          std::memcpy(out + a * kHeads * kD, x + a * kHeads * kD, static_cast<size_t>(b - a) * kHeads * kD * 2);
        } else if (which == 1) {
          sink |= rows(x, out, bsnd_off.data(), kHeads, kHeads * kD, ct, st, kD, a, b);
        } else if (which == 3) {
          for (int64_t r0 = a; r0 < b; r0 += kBlockRows) {
            const int64_t nr = std::min(b, r0 + kBlockRows) - r0;
            for (int h = 0; h < kHeads; ++h) {
              std::memcpy(out + bnsd_off[h] + r0 * kD, x + bnsd_off[h] + r0 * kD, static_cast<size_t>(nr) * kD * 2);
            }
          }
        } else {
          const int64_t ts = which == 2 ? kD : 0;
          for (int64_t r0 = a; r0 < b; r0 += kBlockRows) {
            for (int h0 = 0; h0 < kHeads; h0 += hb) {
              sink |= rows(x, out, bnsd_off.data() + h0, hb, kD, ct, st, ts, r0, std::min(b, r0 + kBlockRows));
            }
          }
        }
      }
      t[which].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const double mc_med = median(t[0]), mc_min = *std::min_element(t[0].begin(), t[0].end());
  g_sink = sink;
  std::printf("x [1, %d, %lld, %d] bf16 (%.2f MiB), %d threads, bnsd %d heads a batch, %d rounds\n", kHeads,
              static_cast<long long>(S), kD, n * 2 / 1048576.0, threads, hb, rounds);
  for (int k = 0; k < kN; ++k) {
    const double med = median(t[k]), mn = *std::min_element(t[k].begin(), t[k].end());
    std::printf("  %-7s median %8.1f us (%.2fx memcpy)  min %8.1f us (%.2fx)\n", names[k], med, med / mc_med, mn,
                mn / mc_min);
  }
  return 0;
}
