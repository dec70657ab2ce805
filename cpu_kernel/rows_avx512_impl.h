// AVX-512 row kernels, included by rows_avx512.cpp (AVX-512F/BW/VL/DQ) and by
// rows_avx512_bf16.cpp (the same plus AVX512_BF16, NPU_OPS_NATIVE_BF16 defined), each under a
// target pragma; rows_generic.cpp calls in here only on a CPU that has the ISA.
//
// Each 16-lane output chunk takes its partners as its ChunkPlan says (offset load, masked loads of
// runs, an in-register permute, or -- from an fp32 copy of the row -- a gather), then computes x*cos
// and xp*sin as two multiplies and one add (explicit intrinsics, compiled with -ffp-contract=off, so
// no FMA can appear), and rounds once to x.dtype:
//   bf16: round to nearest even, exactly as c10 does: by integer arithmetic, or with AVX512_BF16's
//         vcvtneps2bf16 (one instruction) plus a fix-up through the integer path for a vector that
//         holds a subnormal (which that instruction flushes to zero) or a NaN (c10: 0x7FC0);
//   fp16: vcvtps2ph with round-to-nearest-even (IEEE, subnormals kept).
#pragma once

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "cpu_kernel/fixed_perms.h"
#include "cpu_kernel/rows.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace NPU_OPS_AVX512_NS {

// The per-chunk and per-group steps and the row bodies built from them are inlined into the row
// loops whatever the compiler's size heuristics say: a call per chunk passes its vectors through
// memory (measured: the fp16/fp32 streaming rows were left as calls).
#ifndef NPU_OPS_ROW_INLINE
#define NPU_OPS_ROW_INLINE inline __attribute__((always_inline))
#endif

inline __mmask16 lane_mask(int64_t n) {
  return n >= kLanes ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// ---- loads and stores of 16 elements of T as fp32 ---------------------------------------------

template <typename T>
struct Io;

template <>
struct Io<float> {
  static __m512 load(const float* p, __mmask16 m) {
    return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
  }
  static void store(float* p, __m512 v, __mmask16 m) {
    if (m == 0xFFFF) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, m, v);
    }
  }
  static __m512 round_trip(__m512 v) { return v; }
  static void stream(float* p, __m512 v) { _mm512_stream_ps(p, v); }
  // Lanes of `m` from p[lane], the rest kept from `acc`, as fp32.
  using Raw = __m512;
  static Raw raw_zero() { return _mm512_setzero_ps(); }
  static Raw raw_merge(Raw acc, __mmask16 m, const float* p) { return _mm512_mask_loadu_ps(acc, m, p); }
  static __m512 raw_to_fp32(Raw r) { return r; }
  // Unchecked stores and the lanes they would get wrong (none for fp32).
  static constexpr bool kMayNeedFixup = false;
  static __mmask16 needs_fixup(__m512) { return 0; }
  static void store_unchecked(float* p, __m512 v, __mmask16 m) { store(p, v, m); }
  static void stream_unchecked(float* p, __m512 v) { stream(p, v); }
};

#ifdef NPU_OPS_NATIVE_BF16
// The vfpclassps classes that vcvtneps2bf16 rounds differently from c10: subnormal (0x20; flushed
// to zero) and NaN (quiet 0x01, signalling 0x80; c10 writes 0x7FC0 for every NaN).
constexpr int kFixupClasses = 0x20 | 0x01 | 0x80;
#endif

inline __m256i bf16_bits_rne(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

// 16 16-bit elements: a full or masked load / store.
inline __m256i load_halfwords(const void* p, __mmask16 m) {
  return m == 0xFFFF ? _mm256_loadu_si256(static_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p);
}

inline void store_halfwords(void* p, __m256i bits, __mmask16 m) {
  if (m == 0xFFFF) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), bits);
  } else {
    _mm256_mask_storeu_epi16(p, m, bits);
  }
}

inline __m512 bf16_bits_to_fp32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <>
struct Io<c10::BFloat16> {
  static __m512 load(const c10::BFloat16* p, __mmask16 m) { return bf16_bits_to_fp32(load_halfwords(p, m)); }
  static __m256i to_bits(__m512 v) {
#ifdef NPU_OPS_NATIVE_BF16
    // vcvtneps2bf16 flushes subnormal inputs to zero and keeps a NaN's sign and payload; c10 keeps
    // subnormals and writes every NaN as 0x7FC0, so such vectors (rare) take the integer path.
    if (__builtin_expect(_mm512_fpclass_ps_mask(v, kFixupClasses) != 0, 0)) return bf16_bits_rne(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
#else
    return bf16_bits_rne(v);
#endif
  }
  static void store(c10::BFloat16* p, __m512 v, __mmask16 m) { store_halfwords(p, to_bits(v), m); }
  static __m512 round_trip(__m512 v) { return bf16_bits_to_fp32(to_bits(v)); }
  static void stream(c10::BFloat16* p, __m512 v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bits(v));
  }
  using Raw = __m256i;
  static Raw raw_zero() { return _mm256_setzero_si256(); }
  static Raw raw_merge(Raw acc, __mmask16 m, const c10::BFloat16* p) { return _mm256_mask_loadu_epi16(acc, m, p); }
  static __m512 raw_to_fp32(Raw r) { return bf16_bits_to_fp32(r); }
  // Unchecked stores: with AVX512_BF16 one vcvtneps2bf16, wrong only for subnormal or NaN lanes, which
  // needs_fixup reports so the caller can redo that row through the checked path.
#ifdef NPU_OPS_NATIVE_BF16
  static constexpr bool kMayNeedFixup = true;
  static __mmask16 needs_fixup(__m512 v) { return _mm512_fpclass_ps_mask(v, kFixupClasses); }
  static __m256i bits_unchecked(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
#else
  static constexpr bool kMayNeedFixup = false;
  static __mmask16 needs_fixup(__m512) { return 0; }
  static __m256i bits_unchecked(__m512 v) { return bf16_bits_rne(v); }
#endif
  static void store_unchecked(c10::BFloat16* p, __m512 v, __mmask16 m) {
    store_halfwords(p, bits_unchecked(v), m);
  }
  static void stream_unchecked(c10::BFloat16* p, __m512 v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits_unchecked(v));
  }
};

template <>
struct Io<c10::Half> {
  static __m256i to_bits(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static __m512 load(const c10::Half* p, __mmask16 m) { return _mm512_cvtph_ps(load_halfwords(p, m)); }
  static void store(c10::Half* p, __m512 v, __mmask16 m) { store_halfwords(p, to_bits(v), m); }
  static __m512 round_trip(__m512 v) { return _mm512_cvtph_ps(to_bits(v)); }
  static void stream(c10::Half* p, __m512 v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bits(v)); }
  using Raw = __m256i;
  static Raw raw_zero() { return _mm256_setzero_si256(); }
  static Raw raw_merge(Raw acc, __mmask16 m, const c10::Half* p) { return _mm256_mask_loadu_epi16(acc, m, p); }
  static __m512 raw_to_fp32(Raw r) { return _mm512_cvtph_ps(r); }
  static constexpr bool kMayNeedFixup = false;
  static __mmask16 needs_fixup(__m512) { return 0; }
  static void store_unchecked(c10::Half* p, __m512 v, __mmask16 m) { store(p, v, m); }
  static void stream_unchecked(c10::Half* p, __m512 v) { stream(p, v); }
};

// Loads row x (D elements) into the fp32 buffer xf, zero-padded to Dp + 16.
template <typename T>
inline void load_row(const T* x, float* xf, int64_t D, int64_t Dp) {
  for (int64_t j = 0; j < Dp; j += kLanes) {
    _mm512_store_ps(xf + j, Io<T>::load(x + j, lane_mask(D - j)));
  }
  _mm512_store_ps(xf + Dp, _mm512_setzero_ps());
}

// Rows of a batch are usually consecutive in memory but short (256 bytes for D = 128 bf16) and a
// batch ends where the next head starts, so the hardware prefetcher sees many short streams; asking
// for a row a few rows ahead (continuing into the next batch) keeps the loads from waiting on DRAM.
// As far ahead as 8 KiB of rows: at 1,24,8192,128, one thread, 16 rows (4 KiB) left bf16 BNSD 3D at
// 1.35x the limit and 32 rows 1.22x, while fp32 (512-byte rows) was best at 16 rows.
constexpr int64_t kPrefetchBytes = 8 * 1024;

inline int64_t prefetch_rows(int64_t row_bytes) { return std::max<int64_t>(1, kPrefetchBytes / row_bytes); }

// The same distance in table rows of a batch with hn positions (each table row has hn rows).
inline int64_t prefetch_table_rows(int64_t row_bytes, int64_t hn) {
  return std::max<int64_t>(1, (prefetch_rows(row_bytes) + hn - 1) / hn);
}

// Always inlined: as a plain inline function it was left out of table_run_rows's row loops
// altogether (no prefetch instruction in them).
NPU_OPS_ROW_INLINE void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

inline __m512 partners(const ChunkPlan& c, const float* xf) {
  switch (static_cast<ChunkKind>(c.kind)) {
    case ChunkKind::kOffset:
      return _mm512_loadu_ps(xf + c.start);
    case ChunkKind::kPermute:
      return _mm512_maskz_permutex2var_ps(static_cast<__mmask16>(c.nonzero_mask),
                                          _mm512_load_ps(xf + c.a * kLanes),
                                          _mm512_load_si512(c.idx),
                                          _mm512_load_ps(xf + c.b * kLanes));
    case ChunkKind::kSegments: {
      __m512 v = _mm512_setzero_ps();
      for (int32_t k = 0; k < c.nseg; ++k) {
        v = _mm512_mask_loadu_ps(v, static_cast<__mmask16>(c.seg_mask[k]), xf + c.seg_base[k]);
      }
      return v;
    }
    default:
      return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), static_cast<__mmask16>(c.nonzero_mask),
                                      _mm512_load_si512(c.idx), xf, 4);
  }
}

// Stores the 16 results r of one chunk (lanes m) as T; see direct_chunk for kStream, kChecked, fixup.
template <typename T, bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE void chunk_store(T* out, __m512 r, __mmask16 m, __mmask16& fixup) {
  if constexpr (kChecked) {
    if constexpr (kStream) {
      Io<T>::stream(out, r);
    } else {
      Io<T>::store(out, r, m);
    }
  } else {
    if constexpr (Io<T>::kMayNeedFixup) fixup |= Io<T>::needs_fixup(r) & m;
    if constexpr (kStream) {
      Io<T>::stream_unchecked(out, r);
    } else {
      Io<T>::store_unchecked(out, r, m);
    }
  }
}

// Chunk c (elements j = 16c ..) of one row of perm_rows_direct, with the chunk's cos and sin
// values. kFull: D is a multiple of 16 (no masks); kStream: non-temporal stores; kChecked: round
// through the always-exact path. Unchecked, it ORs into `fixup` the lanes whose rounding needs the
// checked path (subnormal or NaN results with AVX512_BF16), so the caller can redo the row.
template <typename T, bool kFull, bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE void direct_chunk(const ChunkPlan& cp, int64_t j, int64_t D, const T* x, T* out, __m512 cv, __m512 sv,
                         __mmask16& fixup) {
  const __mmask16 m = kFull ? static_cast<__mmask16>(0xFFFF) : lane_mask(D - j);
  const __m512 xc = Io<T>::load(x + j, m);
  __m512 xp;
  if (cp.kind == static_cast<int32_t>(ChunkKind::kOffset)) {
    xp = Io<T>::load(x + cp.start, kFull ? m : lane_mask(D - cp.start));
  } else if (cp.kind == static_cast<int32_t>(ChunkKind::kSegments)) {
    // Masked loads never touch the lanes outside their mask, so a base before the row start or
    // a run ending at the row's end reads nothing outside the row.
    typename Io<T>::Raw raw = Io<T>::raw_zero();
    for (int32_t k = 0; k < cp.nseg; ++k) {
      raw = Io<T>::raw_merge(raw, static_cast<__mmask16>(cp.seg_mask[k]), x + cp.seg_base[k]);
    }
    xp = Io<T>::raw_to_fp32(raw);
  } else {
    const __mmask16 nz = static_cast<__mmask16>(cp.nonzero_mask);
    const __m512i idx = _mm512_load_si512(cp.idx);
    const int64_t ja = cp.a * kLanes, jb = cp.b * kLanes;
    const __m512 va = ja == j ? xc : Io<T>::load(x + ja, kFull ? m : lane_mask(D - ja));
    if (cp.a == cp.b) {
      xp = _mm512_maskz_permutexvar_ps(nz, idx, va);
    } else {
      const __m512 vb = jb == j ? xc : Io<T>::load(x + jb, kFull ? m : lane_mask(D - jb));
      xp = _mm512_maskz_permutex2var_ps(nz, va, idx, vb);
    }
  }
  chunk_store<T, kStream, kChecked>(out + j, _mm512_add_ps(_mm512_mul_ps(xc, cv), _mm512_mul_ps(xp, sv)), m, fixup);
}

// One row of perm_rows_direct, its table values read from memory; unchecked, returns the lanes
// that need the checked path, checked 0.
template <typename T, bool kFull, bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE __mmask16 direct_row(const ChunkPlan* chunks, int64_t D, int64_t Dp, const T* x, T* out,
                            const float* cs, const float* sn) {
  __mmask16 fixup = 0;
  for (int64_t j = 0, c = 0; j < Dp; j += kLanes, ++c) {
    direct_chunk<T, kFull, kStream, kChecked>(chunks[c], j, D, x, out, _mm512_loadu_ps(cs + j),
                                              _mm512_loadu_ps(sn + j), fixup);
  }
  return fixup;
}

template <typename T, bool kFull, bool kStream>
inline void direct_row_exact(const ChunkPlan* chunks, int64_t D, int64_t Dp, const T* x, T* out,
                             const float* cs, const float* sn) {
  if (direct_row<T, kFull, kStream, false>(chunks, D, Dp, x, out, cs, sn) != 0) {
    direct_row<T, kFull, kStream, true>(chunks, D, Dp, x, out, cs, sn);  // rare: subnormal or NaN results
  }
}

// One table row of a batch in registers, NC vectors of 16 fp32 each (chunk rows: Dp = 16 * NC,
// NC <= 8, 2 * NC of the 32 vector registers; pair rows: NC = 2 * NG, each group's even then odd
// vector), so that the rows of every position for that table row load only x: a table row is read
// once per batch, not once per row.
// Where the chunk rows take their table values (16 of them from element j): fp32 rows converted
// per call by table_row, signs folded into sin (ChunkTablesF32), or the caller's rows of x's own
// dtype T, converted in registers with y's signs XORed into sin there (ChunkTablesRaw: the call
// converts nothing; see raw_tables).
struct ChunkTablesF32 {
  static __m512 cos(const void* cs, int64_t j) { return _mm512_loadu_ps(static_cast<const float*>(cs) + j); }
  static __m512 sin(const void* sn, const uint32_t*, int64_t j) {
    return _mm512_loadu_ps(static_cast<const float*>(sn) + j);
  }
};

template <typename T>
struct ChunkTablesRaw {
  static __m512 cos(const void* cs, int64_t j) { return Io<T>::load(static_cast<const T*>(cs) + j, 0xFFFF); }
  static __m512 sin(const void* sn, const uint32_t* sign_bits, int64_t j) {
    const __m512 v = Io<T>::load(static_cast<const T*>(sn) + j, 0xFFFF);
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_loadu_si512(sign_bits + j)));
  }
};

// The table rows (cs, sn) of a row as fp32 with the signs folded in, for the exact paths that read
// them so: as they are (ChunkTablesF32), or converted into `buf` (2 * D floats).
template <typename Src>
inline std::pair<const float*, const float*> fp32_table_rows(const void* cs, const void* sn, const uint32_t* sign_bits,
                                                             int64_t D, float* buf) {
  if constexpr (std::is_same_v<Src, ChunkTablesF32>) {
    (void)sign_bits, (void)D, (void)buf;
    return {static_cast<const float*>(cs), static_cast<const float*>(sn)};
  } else {
    for (int64_t j = 0; j < D; j += kLanes) {
      _mm512_storeu_ps(buf + j, Src::cos(cs, j));
      _mm512_storeu_ps(buf + D + j, Src::sin(sn, sign_bits, j));
    }
    return {buf, buf + D};
  }
}

template <int NC>
struct ChunkTables {
  __m512 c[NC], s[NC];
  template <typename Src>
  ChunkTables(Src, const void* cs, const void* sn, const uint32_t* sign_bits) {
    for (int i = 0; i < NC; ++i) {
      c[i] = Src::cos(cs, i * kLanes);
      s[i] = Src::sin(sn, sign_bits, i * kLanes);
    }
  }
  __m512 cos(int i) const { return c[i]; }
  __m512 sin(int i) const { return s[i]; }
};

// The same table values read where they are used (the compiler folds the loads into the
// multiplies): for batches with few rows per table row, where loading a table row into registers
// costs more than it saves.
template <typename Src>
struct MemTables {
  const void* cs;
  const void* sn;
  const uint32_t* sign_bits;
  __m512 cos(int i) const { return Src::cos(cs, i * kLanes); }
  __m512 sin(int i) const { return Src::sin(sn, sign_bits, i * kLanes); }
};

// Batches with fewer rows per table row than this read their table values where used (MemTables,
// PairMemTables); others load each table row into registers once (bf16 x [1, 24, 256, 128] BNSD,
// two heads a batch, one thread: 53.5 us with the tables in registers, 58 us read where used).
constexpr int64_t kRegTablesMinRows = 2;

// No tables in registers: every row reads its table values from memory.
struct NoTables {};
inline NoTables no_tables(const void*, const void*) { return {}; }

// The row loop shared by the rows that may keep a table row in registers. Per table row it calls
// make_tables(cs, sn) once (ChunkTables: loads into registers; MemTables or NoTables: nothing), and
// the tables serve the rows of every position of the batch; per row it prefetches ahead, reads an
// in-place row from a copy in `scratch`, chooses non-temporal stores when out is aligned to
// `stream_align` bytes, and calls fast(x, out, tables, cs, sn, kStream), which returns the lanes
// whose rounding needs the exact path; if any, exact(x, out, cs, sn, kStream) redoes the row (rare:
// subnormal or NaN results). cs and sn are the batch's table rows (const void*); kStream is a
// std::integral_constant<bool>.
template <typename T, typename MakeTables, typename Fast, typename Exact>
NPU_OPS_ROW_INLINE void table_run_rows(const RotatePlan& plan, const RowBatch& b, void* scratch, int64_t stream_align,
                                       MakeTables make_tables, Fast fast, Exact exact) {
  const int64_t row_bytes = plan.D * static_cast<int64_t>(sizeof(T));
  const int64_t ahead = prefetch_table_rows(row_bytes, b.hn);
  T* copy = static_cast<T*>(scratch);
  for (int64_t r = 0; r < b.nr; ++r) {
    const void* cs = b.cos[r];
    const void* sn = b.sin[r];
    const auto tables = make_tables(cs, sn);
    for (int64_t h = 0; h < b.hn; ++h) {
      const T* x = static_cast<const T*>(b.x(r, h));
      T* out = static_cast<T*>(b.out(r, h));
      if (const void* next = b.x_ahead(r, h, ahead)) prefetch_row(next, row_bytes);
      if (b.in_place) {
        // Partners are read while the row is being written: read them from a copy.
        std::memcpy(copy, x, row_bytes);
        x = copy;
      }
      if (b.stream_out && (reinterpret_cast<uintptr_t>(out) % stream_align) == 0) {
        if (fast(x, out, tables, cs, sn, std::true_type{}) != 0) exact(x, out, cs, sn, std::true_type{});
      } else {
        if (fast(x, out, tables, cs, sn, std::false_type{}) != 0) exact(x, out, cs, sn, std::false_type{});
      }
    }
  }
  if (b.stream_out) _mm_sfence();  // order the non-temporal stores before the batch ends
}

// table_run_rows for rows of NC full chunks: each table row in registers (ChunkTables) for batches
// of at least kRegTablesMinRows rows per table row, else read where used (MemTables); non-temporal
// stores need every chunk aligned to its own size.
template <typename T, typename Src, int NC, typename Fast, typename Exact>
NPU_OPS_ROW_INLINE void chunk_table_run_rows(const RotatePlan& plan, const RowBatch& b, void* scratch, Fast fast,
                                             Exact exact) {
  const uint32_t* sign_bits = plan.sign_bits.data();
  if (b.hn >= kRegTablesMinRows) {
    const auto regs = [=](const void* cs, const void* sn) { return ChunkTables<NC>(Src{}, cs, sn, sign_bits); };
    table_run_rows<T>(plan, b, scratch, kLanes * sizeof(T), regs, fast, exact);
  } else {
    const auto mem = [=](const void* cs, const void* sn) { return MemTables<Src>{cs, sn, sign_bits}; };
    table_run_rows<T>(plan, b, scratch, kLanes * sizeof(T), mem, fast, exact);
  }
}

// The half rotation (chunk c's partners are chunk c + NC/2 mod NC, in order: rotate_half of one
// section): every chunk of the row is loaded and converted once, into registers, and serves as
// its own chunk and as its partner's partner.
template <typename T, int NC, bool kStream, typename Tables>
NPU_OPS_ROW_INLINE __mmask16 half_row_regs(const T* x, T* out, const Tables& t) {
  __m512 xv[NC];
  for (int c = 0; c < NC; ++c) xv[c] = Io<T>::load(x + c * kLanes, 0xFFFF);
  __mmask16 fixup = 0;
  for (int c = 0; c < NC; ++c) {
    const __m512 r = _mm512_add_ps(_mm512_mul_ps(xv[c], t.cos(c)), _mm512_mul_ps(xv[(c + NC / 2) % NC], t.sin(c)));
    chunk_store<T, kStream, false>(out + c * kLanes, r, 0xFFFF, fixup);
  }
  return fixup;
}

// The interleave rotation (every partner is j ^ 1: the other element of its pair): one in-lane
// swap of each chunk, no index vector.
template <typename T, int NC, bool kStream, typename Tables>
NPU_OPS_ROW_INLINE __mmask16 swap_row_regs(const T* x, T* out, const Tables& t) {
  __mmask16 fixup = 0;
  for (int c = 0; c < NC; ++c) {
    const __m512 xc = Io<T>::load(x + c * kLanes, 0xFFFF);
    const __m512 xp = _mm512_permute_ps(xc, 0xB1);  // lanes (1, 0, 3, 2) of every 128-bit lane
    chunk_store<T, kStream, false>(out + c * kLanes, _mm512_add_ps(_mm512_mul_ps(xc, t.cos(c)), _mm512_mul_ps(xp, t.sin(c))),
                                   0xFFFF, fixup);
  }
  return fixup;
}

// Which specialised row perm_rows_direct_regs takes. (Other plans keep reading their table rows
// per row: with them in registers, 3D 44+44+40 fp16/fp32 rows were no faster, or slower.)
enum class ChunkShape { kHalf, kSwap };

// perm_rows_direct for D = 16 * NC with NC in 1..8 and the half rotation (half_row_regs) or the
// interleave swap (swap_row_regs): each table row of a batch is loaded into registers once.
template <typename T, typename Src, int NC, ChunkShape kShape>
void perm_rows_direct_regs(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const ChunkPlan* chunks = plan.chunks.data();
  const int64_t D = plan.D;
  const uint32_t* sign_bits = plan.sign_bits.data();
  const auto fast = [](const T* x, T* out, const auto& t, const void*, const void*, auto stream) {
    if constexpr (kShape == ChunkShape::kHalf) {
      return half_row_regs<T, NC, decltype(stream)::value>(x, out, t);
    } else {
      return swap_row_regs<T, NC, decltype(stream)::value>(x, out, t);
    }
  };
  const auto exact = [=](const T* x, T* out, const void* cs, const void* sn, auto stream) {
    alignas(64) float buf[2 * kRowChunks * kLanes];
    const auto [c, s] = fp32_table_rows<Src>(cs, sn, sign_bits, D, buf);
    direct_row<T, true, decltype(stream)::value, true>(chunks, D, D, x, out, c, s);
  };
  chunk_table_run_rows<T, Src, NC>(plan, b, scratch, fast, exact);
}

// A row of NC <= kRowChunks full chunks held in registers, each chunk's partners formed by up to
// four two-source permutes of them (ChunkPlan::row_idx, row_part): any signed permutation of such a
// row, with one conversion per element and no partner loads (the 3D modes of fp16 and fp32 x).
// The table values come from registers (a table row loaded once per batch; 3D [1, 24, 256, 128]
// one thread BSND: fp16 72 -> 65 us, fp32 84 -> 74 us against reading them where used), or, for a
// batch of one row per table row, where used.
template <typename T, int NC, bool kStream, typename Tables>
NPU_OPS_ROW_INLINE __mmask16 chunk_row_words(const ChunkPlan* chunks, const T* x, T* out, const Tables& t) {
  static_assert(NC >= 1 && NC <= kRowChunks, "a row in registers has at most kRowChunks chunks");
  constexpr int kPairs = (NC + 1) / 2;
  __m512 v[2 * kPairs];
  for (int c = 0; c < 2 * kPairs; ++c) v[c] = c < NC ? Io<T>::load(x + c * kLanes, 0xFFFF) : _mm512_setzero_ps();
  __mmask16 fixup = 0;
  for (int c = 0; c < NC; ++c) {
    const ChunkPlan& cp = chunks[c];
    const __m512i idx = _mm512_load_si512(cp.row_idx);
    __m512 p = _mm512_setzero_ps();
    for (int k = 0; k < kPairs; ++k) {
      if (cp.row_part[k] != 0) {
        p = _mm512_mask_mov_ps(p, static_cast<__mmask16>(cp.row_part[k]),
                               _mm512_permutex2var_ps(v[2 * k], idx, v[2 * k + 1]));
      }
    }
    const __m512 r = _mm512_add_ps(_mm512_mul_ps(v[c], t.cos(c)), _mm512_mul_ps(p, t.sin(c)));
    chunk_store<T, kStream, false>(out + c * kLanes, r, 0xFFFF, fixup);
  }
  return fixup;
}

// perm_rows_direct (or, for plans with gather chunks, perm_rows_buffered) for D = 16 * NC, any
// signed permutation, the row in registers (chunk_row_words).
template <typename T, typename Src, int NC>
void perm_rows_words(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const ChunkPlan* chunks = plan.chunks.data();
  const int64_t D = plan.D;
  const uint32_t* sign_bits = plan.sign_bits.data();
  const auto fast = [=](const T* x, T* out, const auto& t, const void*, const void*, auto stream) {
    return chunk_row_words<T, NC, decltype(stream)::value>(chunks, x, out, t);
  };
  const auto exact = [=](const T* x, T* out, const void* cs, const void* sn, auto stream) {
    // The rounding path that is exact for every value, partners from the row as the fast path takes them.
    alignas(64) float xf[kRowChunks * kLanes + kLanes];
    alignas(64) float buf[2 * kRowChunks * kLanes];
    load_row(x, xf, D, D);
    const auto [c, s] = fp32_table_rows<Src>(cs, sn, sign_bits, D, buf);
    for (int64_t j = 0, k = 0; j < D; j += kLanes, ++k) {
      const __m512 p = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), static_cast<__mmask16>(chunks[k].nonzero_mask),
                                                _mm512_load_si512(chunks[k].row_idx), xf, 4);
      const __m512 r = _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(xf + j), _mm512_loadu_ps(c + j)),
                                     _mm512_mul_ps(p, _mm512_loadu_ps(s + j)));
      if constexpr (decltype(stream)::value) {
        Io<T>::stream(out + j, r);
      } else {
        Io<T>::store(out + j, r, 0xFFFF);
      }
    }
  };
  // In place, the row is read whole into registers before any of it is written.
  chunk_table_run_rows<T, Src, NC>(plan, b, scratch, fast, exact);
}

// ---- the fixed permutations (fixed_perms.h) -------------------------------------------------
// The row is held in registers as 8 fp32 vectors v[0..7]. The partners of chunk c come from the
// vectors that hold them, found at compile time: one of them, one permute (or none, in order);
// two, one two-source permute; three, that and a masked one-source permute; four, two two-source
// permutes and a blend. With constant source registers the compiler keeps the row in registers
// (the rows for any permutation index them at run time). 3D 44+44+40, the row loop alone over 16
// L1-resident rows (two heads, eight table rows), one thread: 6.5-7.0 ns a row against 8.8-9.1
// (fp16, pair rows) and 10.4 (fp32, chunk rows).
struct alignas(64) FixedChunk {
  int32_t idx0[kLanes];  // the first (two-source) permute
  int32_t idx1[kLanes];  // three or four sources: the second permute
  int32_t nsrc;          // source vectors, 1 to 4
  int32_t src[4];        // in order of first use
  uint32_t second;       // lanes the second permute gives
  bool in_order;         // one source, lane l from lane l: no permute
};

// Where element j of a row lies among the row's 8 vectors: in natural order (vector j / 16, lane
// j % 16), or -- kPairs, the bf16 pair rows' layout -- group j / 32's even elements then its odd
// ones.
template <bool kPairs>
constexpr int32_t fixed_vector_of(int32_t j) {
  return kPairs ? 2 * (j / (2 * kLanes)) + j % 2 : j / kLanes;
}
template <bool kPairs>
constexpr int32_t fixed_lane_of(int32_t j) {
  return kPairs ? (j % (2 * kLanes)) / 2 : j % kLanes;
}
template <bool kPairs>
constexpr int32_t fixed_element(int c, int l) {
  return kPairs ? (c / 2) * 2 * kLanes + 2 * l + c % 2 : c * kLanes + l;
}

template <int K, bool kPairs>
constexpr FixedChunk fixed_chunk(int c) {
  FixedChunk f{};
  for (int l = 0; l < kLanes; ++l) {
    const int32_t v = fixed_vector_of<kPairs>(fixed_partner(K, fixed_element<kPairs>(c, l)));
    bool seen = false;
    for (int k = 0; k < f.nsrc && k < 4; ++k) seen = seen || f.src[k] == v;
    if (!seen) {
      if (f.nsrc < 4) f.src[f.nsrc] = v;
      ++f.nsrc;  // more than 4: rejected by fixed_partners' static_assert
    }
  }
  f.in_order = f.nsrc == 1;
  for (int l = 0; l < kLanes && f.nsrc <= 4; ++l) {
    const int32_t p = fixed_partner(K, fixed_element<kPairs>(c, l));
    int k = 0;
    while (f.src[k] != fixed_vector_of<kPairs>(p)) ++k;
    f.in_order = f.in_order && fixed_lane_of<kPairs>(p) == l;
    if (k < 2) {
      f.idx0[l] = k * kLanes + fixed_lane_of<kPairs>(p);
    } else {
      f.idx1[l] = (k - 2) * kLanes + fixed_lane_of<kPairs>(p);
      f.second |= 1u << l;
    }
  }
  return f;
}

template <int K, bool kPairs, int C>
struct FixedChunkOf {
  static constexpr FixedChunk value = fixed_chunk<K, kPairs>(C);
};

static_assert(kFixedPermD == 8 * kLanes, "the fixed rows hold a row as 8 vectors");

template <int K, bool kPairs, int C>
NPU_OPS_ROW_INLINE __m512 fixed_partners(const __m512 (&v)[8]) {
  constexpr const FixedChunk& f = FixedChunkOf<K, kPairs, C>::value;
  static_assert(f.nsrc >= 1 && f.nsrc <= 4, "a fixed row's chunk takes its partners from 1 to 4 vectors");
  if constexpr (f.in_order) {
    return v[f.src[0]];
  } else if constexpr (f.nsrc == 1) {
    return _mm512_permutexvar_ps(_mm512_load_si512(f.idx0), v[f.src[0]]);
  } else {
    const __m512 p = _mm512_permutex2var_ps(v[f.src[0]], _mm512_load_si512(f.idx0), v[f.src[1]]);
    if constexpr (f.nsrc == 2) {
      return p;
    } else if constexpr (f.nsrc == 3) {
      return _mm512_mask_permutexvar_ps(p, static_cast<__mmask16>(f.second), _mm512_load_si512(f.idx1), v[f.src[2]]);
    } else {
      return _mm512_mask_mov_ps(p, static_cast<__mmask16>(f.second),
                                _mm512_permutex2var_ps(v[f.src[2]], _mm512_load_si512(f.idx1), v[f.src[3]]));
    }
  }
}

// kChecked: see direct_chunk.
template <typename T, int K, bool kStream, bool kChecked, typename Tables, int... C>
NPU_OPS_ROW_INLINE __mmask16 fixed_row(const T* x, T* out, const Tables& t, std::integer_sequence<int, C...>) {
  __m512 v[8];
  ((v[C] = Io<T>::load(x + C * kLanes, 0xFFFF)), ...);
  __mmask16 fixup = 0;
  ((chunk_store<T, kStream, kChecked>(
       out + C * kLanes, _mm512_add_ps(_mm512_mul_ps(v[C], t.cos(C)), _mm512_mul_ps(fixed_partners<K, false, C>(v), t.sin(C))),
       0xFFFF, fixup)),
   ...);
  return fixup;
}

template <typename T, typename Src, int K>
void fixed_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const uint32_t* sign_bits = plan.sign_bits.data();
  using Chunks = std::make_integer_sequence<int, 8>;
  const auto fast = [](const T* x, T* out, const auto& t, const void*, const void*, auto stream) {
    return fixed_row<T, K, decltype(stream)::value, false>(x, out, t, Chunks{});
  };
  const auto exact = [=](const T* x, T* out, const void* cs, const void* sn, auto stream) {
    fixed_row<T, K, decltype(stream)::value, true>(x, out, MemTables<Src>{cs, sn, sign_bits}, Chunks{});
  };
  // In place, the row is read whole into registers before any of it is written.
  chunk_table_run_rows<T, Src, 8>(plan, b, scratch, fast, exact);
}

template <typename T, typename Src, int... K>
RowsFn fixed_rows_fn(int32_t k, std::integer_sequence<int, K...>) {
  RowsFn fn = nullptr;
  ((fn = k == K ? &fixed_rows<T, Src, K> : fn), ...);
  return fn;
}

template <typename T>
void perm_rows_buffered(const RotatePlan& plan, const RowBatch& b, void* scratch);

// Signed permutation, no gather chunk: partners are read straight from the source row (an offset
// load, up to three masked loads of runs, or one or two aligned source vectors and a permute), so
// the row needs no fp32 buffer.
// Src = ChunkTablesRaw<T> only for plans the three row forms above take (raw_tables).
template <typename T, typename Src>
void perm_rows_direct(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D, Dp = plan.Dp;
  const bool full = D == Dp;  // every chunk full: no masks, no reads past the row
  // Rows of up to kRowChunks full chunks: the half rotation and the interleave swap with a table row
  // in registers, any other plan with the row in registers (in place too: these rows read a row
  // whole before writing it). Raw table rows (Src = ChunkTablesRaw) come only with the first two.
  if (full && plan.chunks_half_rotation) {
    switch (D / kLanes) {
      case 2: return perm_rows_direct_regs<T, Src, 2, ChunkShape::kHalf>(plan, b, scratch);
      case 4: return perm_rows_direct_regs<T, Src, 4, ChunkShape::kHalf>(plan, b, scratch);
      case 6: return perm_rows_direct_regs<T, Src, 6, ChunkShape::kHalf>(plan, b, scratch);
      case 8: return perm_rows_direct_regs<T, Src, 8, ChunkShape::kHalf>(plan, b, scratch);
      default: break;
    }
  }
  if (full && plan.pair_swap) {
    switch (D / kLanes) {
      case 1: return perm_rows_direct_regs<T, Src, 1, ChunkShape::kSwap>(plan, b, scratch);
      case 2: return perm_rows_direct_regs<T, Src, 2, ChunkShape::kSwap>(plan, b, scratch);
      case 3: return perm_rows_direct_regs<T, Src, 3, ChunkShape::kSwap>(plan, b, scratch);
      case 4: return perm_rows_direct_regs<T, Src, 4, ChunkShape::kSwap>(plan, b, scratch);
      case 5: return perm_rows_direct_regs<T, Src, 5, ChunkShape::kSwap>(plan, b, scratch);
      case 6: return perm_rows_direct_regs<T, Src, 6, ChunkShape::kSwap>(plan, b, scratch);
      case 7: return perm_rows_direct_regs<T, Src, 7, ChunkShape::kSwap>(plan, b, scratch);
      case 8: return perm_rows_direct_regs<T, Src, 8, ChunkShape::kSwap>(plan, b, scratch);
      default: break;
    }
  }
  if (full) {
    switch (D / kLanes) {
      case 1: return perm_rows_words<T, Src, 1>(plan, b, scratch);
      case 2: return perm_rows_words<T, Src, 2>(plan, b, scratch);
      case 3: return perm_rows_words<T, Src, 3>(plan, b, scratch);
      case 4: return perm_rows_words<T, Src, 4>(plan, b, scratch);
      case 5: return perm_rows_words<T, Src, 5>(plan, b, scratch);
      case 6: return perm_rows_words<T, Src, 6>(plan, b, scratch);
      case 7: return perm_rows_words<T, Src, 7>(plan, b, scratch);
      case 8: return perm_rows_words<T, Src, 8>(plan, b, scratch);
      default: break;
    }
  }
  // In place, a chunk's partners may already be overwritten: take the buffered rows.
  if (b.in_place) return perm_rows_buffered<T>(plan, b, scratch);
  const int64_t ahead = prefetch_table_rows(D * static_cast<int64_t>(sizeof(T)), b.hn);
  const ChunkPlan* chunks = plan.chunks.data();
  // Plain loops, not a lambda over the rows: locals captured by reference live in memory, and
  // every vector store (which may alias anything) makes the compiler load them again (3D rows
  // were 6-15 % slower that way).
  for (int64_t r = 0; r < b.nr; ++r) {
    for (int64_t h = 0; h < b.hn; ++h) {
      const auto [x, out, cs, sn] = BatchRow<T, float>(b, r, h);
      if (const void* next = b.x_ahead(r, h, ahead)) prefetch_row(next, D * sizeof(T));
      // Non-temporal stores need every chunk full and aligned to its own size.
      const bool stream = b.stream_out && full && (reinterpret_cast<uintptr_t>(out) % (kLanes * sizeof(T))) == 0;
      if (!full) {
        direct_row_exact<T, false, false>(chunks, D, Dp, x, out, cs, sn);
      } else if (stream) {
        direct_row_exact<T, true, true>(chunks, D, Dp, x, out, cs, sn);
      } else {
        direct_row_exact<T, true, false>(chunks, D, Dp, x, out, cs, sn);
      }
    }
  }
  if (b.stream_out) _mm_sfence();  // order the non-temporal stores before the batch ends
}

// Signed permutation with gather chunks: the row is converted to an fp32 buffer first.
template <typename T>
void perm_rows_buffered(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D, Dp = plan.Dp;
  const int64_t ahead = prefetch_table_rows(D * static_cast<int64_t>(sizeof(T)), b.hn);
  float* xf = static_cast<float*>(scratch);
  const ChunkPlan* chunks = plan.chunks.data();
  for (int64_t r = 0; r < b.nr; ++r) {
    for (int64_t h = 0; h < b.hn; ++h) {
      const auto [x, out, cs, sn] = BatchRow<T, float>(b, r, h);
      if (const void* next = b.x_ahead(r, h, ahead)) prefetch_row(next, D * sizeof(T));
      load_row(x, xf, D, Dp);
      for (int64_t j = 0, c = 0; j < Dp; j += kLanes, ++c) {
        const __m512 xc = _mm512_load_ps(xf + j);
        const __m512 xp = partners(chunks[c], xf);
        const __m512 a = _mm512_mul_ps(xc, _mm512_loadu_ps(cs + j));
        const __m512 s = _mm512_mul_ps(xp, _mm512_loadu_ps(sn + j));
        Io<T>::store(out + j, _mm512_add_ps(a, s), lane_mask(D - j));
      }
    }
  }
}

// Dense y, four rows at a time so each loaded vector of y serves four accumulators, 64 columns per
// pass. The driver loads the rows (fp32, plus bf16 copies for the dot-product GEMM: in place, a
// row is overwritten while later column blocks still need it), runs the GEMM policy, and finishes
// each pass with the elementwise step.
constexpr int kDenseRows = 4;
constexpr int kDenseVecs = 4;
using DenseAcc = __m512[kDenseRows][kDenseVecs];

template <typename T, typename Gemm>
void dense_rows_driver(const RotatePlan& plan, const RowBatch& b, void* scratch, Gemm gemm) {
  const int64_t D = plan.D, Dp = plan.Dp;
  float* xf = static_cast<float*>(scratch);  // kDenseRows fp32 rows of Dp + 16, then T copies
  const int64_t ld = Dp + kLanes;
  T* xcopy = reinterpret_cast<T*>(xf + kDenseRows * ld);
  static_assert(kDenseRows * (4 + 2) <= kScratchRows * 8, "scratch too small");
  const int64_t n = b.n();
  for (int64_t r0 = 0; r0 < n; r0 += kDenseRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kDenseRows, n - r0));
    const T* xs[kDenseRows];
    // Row i of the batch in table-row order: (i / hn, i % hn).
    const auto row = [&](int64_t i) { return BatchRow<T, float>(b, i / b.hn, i % b.hn); };
    for (int rr = 0; rr < kDenseRows; ++rr) {
      // Missing rows of a short batch repeat the last one (computed, never stored).
      const T* src = row(r0 + (rr < rows ? rr : rows - 1)).x;
      load_row(src, xf + rr * ld, D, Dp);
      std::memcpy(xcopy + rr * ld, src, D * sizeof(T));
      xs[rr] = xcopy + rr * ld;
    }
    for (int64_t j0 = 0; j0 < Dp; j0 += kDenseVecs * kLanes) {
      const int nv = static_cast<int>(std::min<int64_t>(kDenseVecs, (Dp - j0) / kLanes));
      DenseAcc acc;
      for (int rr = 0; rr < kDenseRows; ++rr)
        for (int v = 0; v < kDenseVecs; ++v) acc[rr][v] = _mm512_setzero_ps();
      gemm(acc, xf, ld, xs, j0, nv);
      for (int rr = 0; rr < rows; ++rr) {
        const auto [x, out, cs, sn] = row(r0 + rr);
        for (int v = 0; v < nv; ++v) {
          const int64_t j = j0 + v * kLanes;
          const __m512 xy = Io<T>::round_trip(acc[rr][v]);  // x @ y in x.dtype, as the cube writes it
          const __m512 a = _mm512_mul_ps(_mm512_load_ps(xf + rr * ld + j), _mm512_loadu_ps(cs + j));
          const __m512 s = _mm512_mul_ps(xy, _mm512_loadu_ps(sn + j));
          Io<T>::store(out + j, _mm512_add_ps(a, s), lane_mask(D - j));
        }
      }
    }
  }
}

// fp32 GEMM on the fp32 rows: fp32 FMAs (one rounding per step, as the portable kernels do it)
// over the rows of y in dense_row_order, so the same bits on every ISA.
inline void gemm_fp32(const float* y, int64_t D, int64_t Dp, bool pairwise, DenseAcc& acc, const float* xf,
                      int64_t ld, int64_t j0, int nv) {
  for (int64_t k = 0; k < D; ++k) {
    const int64_t i = dense_row_order(k, D, pairwise);
    const float* yi = y + i * Dp + j0;
    __m512 yv[kDenseVecs];
    for (int v = 0; v < kDenseVecs; ++v) yv[v] = v < nv ? _mm512_loadu_ps(yi + v * kLanes) : _mm512_setzero_ps();
    for (int rr = 0; rr < kDenseRows; ++rr) {
      const __m512 xb = _mm512_set1_ps(xf[rr * ld + i]);
      for (int v = 0; v < kDenseVecs; ++v) acc[rr][v] = _mm512_fmadd_ps(xb, yv[v], acc[rr][v]);
    }
  }
}

template <typename T>
void dense_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  const int64_t D = plan.D, Dp = plan.Dp;
  const float* y = plan.y32.data();
  const bool pairwise = dense_pairwise(plan, std::is_same_v<T, c10::BFloat16>);
  dense_rows_driver<T>(plan, b, scratch, [&](DenseAcc& acc, const float* xf, int64_t ld, const T* const*, int64_t j0, int nv) {
    gemm_fp32(y, D, Dp, pairwise, acc, xf, ld, j0, nv);
  });
}

#ifdef NPU_OPS_NATIVE_BF16
// Whether every element of the rows xs[0..kDenseRows) is zero or has its absolute bits in
// [lo, hi] (RotatePlan::dp_lo_bits / dp_hi_bits): then no input, product or partial sum of the
// dot-product GEMM is subnormal or overflows, and its result equals gemm_fp32's bit for bit.
inline bool dpbf16_rows_exact(const c10::BFloat16* const* xs, int64_t D, uint16_t lo, uint16_t hi) {
  const __m512i vlo = _mm512_set1_epi16(static_cast<int16_t>(lo));
  const __m512i range = _mm512_set1_epi16(static_cast<int16_t>(hi - lo));
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF);
  __mmask32 bad = 0;
  for (int rr = 0; rr < kDenseRows; ++rr) {
    for (int64_t j = 0; j < D; j += 2 * kLanes) {
      const __mmask32 m = D - j >= 2 * kLanes ? ~__mmask32(0) : (__mmask32(1) << (D - j)) - 1;
      const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, xs[rr] + j), abs_mask);
      const __mmask32 nonzero = _mm512_test_epi16_mask(v, v);
      bad |= _mm512_mask_cmpgt_epu16_mask(nonzero, _mm512_sub_epi16(v, vlo), range);
    }
  }
  return bad == 0;
}

// bf16 x and a y exact in bf16: the GEMM on AVX512_BF16 dot products (vdpbf16ps: two bf16
// products per fp32 lane, accumulated in fp32, row 2i+1 of y before row 2i), twice the multiply
// rate of fp32 FMAs. vdpbf16ps treats subnormal inputs and results as zero, so a group of rows
// where one could occur (dpbf16_rows_exact) takes gemm_fp32, which gives the same bits as
// vdpbf16ps everywhere else and the IEEE result there.
void dense_rows_dpbf16(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  using T = c10::BFloat16;
  const int64_t D = plan.D, Dp = plan.Dp;
  const T* yp = plan.y_bf16_pairs.data();
  bool dp_exact = true;
  dense_rows_driver<T>(plan, b, scratch, [&](DenseAcc& acc, const float* xf, int64_t ld, const T* const* xs, int64_t j0, int nv) {
    if (j0 == 0) dp_exact = dpbf16_rows_exact(xs, D, plan.dp_lo_bits, plan.dp_hi_bits);
    if (!dp_exact) return gemm_fp32(plan.y32.data(), D, Dp, true, acc, xf, ld, j0, nv);
    for (int64_t i2 = 0; i2 < D / 2; ++i2) {
      const T* yi = yp + (i2 * Dp + j0) * 2;
      __m512i yv[kDenseVecs];
      for (int v = 0; v < kDenseVecs; ++v) {
        yv[v] = v < nv ? _mm512_loadu_si512(yi + v * 2 * kLanes) : _mm512_setzero_si512();
      }
      for (int rr = 0; rr < kDenseRows; ++rr) {
        uint32_t pair;
        std::memcpy(&pair, xs[rr] + 2 * i2, sizeof(pair));
        const __m512i xb = _mm512_set1_epi32(static_cast<int>(pair));
        for (int v = 0; v < kDenseVecs; ++v) {
          acc[rr][v] = _mm512_dpbf16_ps(acc[rr][v], (__m512bh)xb, (__m512bh)yv[v]);
        }
      }
    }
  });
}
#endif

// ---- bf16 rows as pairs (PairGroupPlan) ----------------------------------------------------------
// A group of 32 bf16 elements is one 512-bit load; as 16 32-bit pairs, a shift left by 16 gives the
// even elements as fp32 and an AND with 0xFFFF0000 the odd ones, so no widening is needed. The
// partners come as pairs the same way (one load or permute), the tables are kept even/odd
// (pair_table_row), and the two fp32 results are rounded back to 32 bf16 in natural order.

inline __m512 even_fp32(__m512i pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }
inline __m512 odd_fp32(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// Pairs of groups a and b of row x, lane l taking lane idx[l] of (a | b).
inline __m512i permute_groups(const c10::BFloat16* x, int32_t a, const int32_t* idx, int32_t b) {
  return _mm512_permutex2var_epi32(_mm512_loadu_si512(x + a * 2 * kLanes), _mm512_load_si512(idx),
                                   _mm512_loadu_si512(x + b * 2 * kLanes));
}

// The partner pairs of group g of row x, in output order once `swap` lanes are rotated by 16.
inline __m512i pair_partners(const PairGroupPlan& g, const c10::BFloat16* x, __m512i own) {
  switch (static_cast<PairKind>(g.kind)) {
    case PairKind::kSame:
      return own;
    case PairKind::kOffset:
      return _mm512_loadu_si512(x + g.start);
    case PairKind::kPermute:
      return permute_groups(x, g.a, g.idx, g.b);
    case PairKind::kSegments: {
      // Masked loads never touch the lanes outside their mask (a base before the row start reads
      // nothing outside the row).
      __m512i v = _mm512_setzero_si512();
      for (int32_t k = 0; k < g.nseg; ++k) {
        v = _mm512_mask_loadu_epi32(v, static_cast<__mmask16>(g.seg_mask[k]), x + g.seg_base[k]);
      }
      return v;
    }
    default:
      return _mm512_mask_mov_epi32(permute_groups(x, g.a, g.idx, g.b), static_cast<__mmask16>(g.mask2),
                                   permute_groups(x, g.c, g.idx2, g.d));
  }
}

// Rounds the even and odd fp32 results to 32 bf16 in natural order, exactly as c10 does (the
// integer path: subnormals kept, NaN -> 0x7FC0).
inline __m512i pair_bits_exact(__m512 even, __m512 odd) {
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
  const __m512i be = _mm512_castps_si512(even), bo = _mm512_castps_si512(odd);
  __m512i re = _mm512_add_epi32(be, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(be, 16), one)));
  __m512i ro = _mm512_add_epi32(bo, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(bo, 16), one)));
  re = _mm512_mask_mov_epi32(_mm512_srli_epi32(re, 16), _mm512_cmp_ps_mask(even, even, _CMP_UNORD_Q),
                             _mm512_set1_epi32(0x7FC0));
  ro = _mm512_mask_mov_epi32(ro, _mm512_cmp_ps_mask(odd, odd, _CMP_UNORD_Q),
                             _mm512_set1_epi32(0x7FC00000));
  // (ro & 0xFFFF0000) | re
  return _mm512_ternarylogic_epi32(ro, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), re, 0xEA);
}

#ifdef NPU_OPS_NATIVE_BF16
// vcvtne2ps2bf16 (subnormal inputs flushed, NaN kept as is: the caller checks) and one word permute back to
// natural order.
inline __m512i pair_bits_native(__m512 even, __m512 odd) {
  alignas(64) static constexpr int16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // [even x16 | odd x16]
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), packed);
}
#endif

// Rounds a group's even and odd fp32 results to 32 bf16 and stores them; see pair_group.
template <bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE void pair_store(c10::BFloat16* out, __m512 re, __m512 ro, __mmask16& fixup) {
  __m512i bits;
#ifdef NPU_OPS_NATIVE_BF16
  if constexpr (kChecked) {
    bits = pair_bits_exact(re, ro);
  } else {
    fixup = _kor_mask16(fixup, _kor_mask16(_mm512_fpclass_ps_mask(re, kFixupClasses), _mm512_fpclass_ps_mask(ro, kFixupClasses)));
    bits = pair_bits_native(re, ro);
  }
#else
  (void)fixup;
  bits = pair_bits_exact(re, ro);
#endif
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), bits);
  } else {
    _mm512_storeu_si512(out, bits);
  }
}

// One group g of 32 elements of a row, with the group's table values (even and odd halves of cos
// and sin); ORs the subnormal- or NaN-result lanes into `fixup` when unchecked with AVX512_BF16.
template <PairShape kShape, bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE void pair_group(const PairGroupPlan& gp, int64_t g, const c10::BFloat16* x, c10::BFloat16* out,
                       __m512 ce, __m512 co, __m512 se, __m512 so, __mmask16& fixup) {
  const __m512i own = _mm512_loadu_si512(x + g * 2 * kLanes);
  const __m512 xe = even_fp32(own), xo = odd_fp32(own);
  __m512 pe, po;
  if (kShape == PairShape::kAllSwapped ||
      (kShape == PairShape::kMixed && gp.kind == static_cast<int32_t>(PairKind::kSame) &&
       gp.swap == 0xFFFFu && gp.nonzero == 0xFFFFFFFFu)) {
    pe = xo;  // interleave: each element's partner is the other one of its pair
    po = xe;
  } else if (kShape == PairShape::kAllOffset || kShape == PairShape::kHalfRotation) {
    const __m512i p = _mm512_loadu_si512(x + gp.start);
    pe = even_fp32(p);
    po = odd_fp32(p);
  } else if (kShape == PairShape::kUnswapped) {
    const __m512i p = pair_partners(gp, x, own);
    pe = even_fp32(p);
    po = odd_fp32(p);
  } else {
    __m512i p = pair_partners(gp, x, own);
    if (gp.swap != 0) p = _mm512_mask_rol_epi32(p, static_cast<__mmask16>(gp.swap), p, 16);
    if (gp.nonzero != 0xFFFFFFFFu) p = _mm512_maskz_mov_epi16(gp.nonzero, p);
    pe = even_fp32(p);
    po = odd_fp32(p);
  }
  pair_store<kStream, kChecked>(out + g * 2 * kLanes, _mm512_add_ps(_mm512_mul_ps(xe, ce), _mm512_mul_ps(pe, se)),
                                _mm512_add_ps(_mm512_mul_ps(xo, co), _mm512_mul_ps(po, so)), fixup);
}

// Where the pair rows take their table values. PairTablesF32: rows converted by pair_table_row
// (fp32, each group's even then odd elements, signs folded into sin). PairTablesBf16: the caller's
// bf16 rows as they are, split in registers like x and the signs XORed in from plan.sign16, so that
// a call converts nothing and a table row is half the bytes.
struct PairTablesF32 {
  static NPU_OPS_ROW_INLINE void group(const void* cs, const void* sn, const uint16_t*, int64_t g, __m512& ce,
                                       __m512& co, __m512& se, __m512& so) {
    const float* c = static_cast<const float*>(cs) + g * 2 * kLanes;
    const float* s = static_cast<const float*>(sn) + g * 2 * kLanes;
    ce = _mm512_loadu_ps(c);
    co = _mm512_loadu_ps(c + kLanes);
    se = _mm512_loadu_ps(s);
    so = _mm512_loadu_ps(s + kLanes);
  }
};

struct PairTablesBf16 {
  static NPU_OPS_ROW_INLINE void group(const void* cs, const void* sn, const uint16_t* sign16, int64_t g, __m512& ce,
                                       __m512& co, __m512& se, __m512& so) {
    const __m512i c = _mm512_loadu_si512(static_cast<const c10::BFloat16*>(cs) + g * 2 * kLanes);
    const __m512i s = _mm512_xor_si512(_mm512_loadu_si512(static_cast<const c10::BFloat16*>(sn) + g * 2 * kLanes),
                                       _mm512_loadu_si512(sign16 + g * 2 * kLanes));
    ce = even_fp32(c);
    co = odd_fp32(c);
    se = even_fp32(s);
    so = odd_fp32(s);
  }
};

// One table row of the pair rows in registers (ChunkTables' layout: group g's even then odd vector).
template <typename Src, int NG>
struct PairRegTables {
  __m512 c[2 * NG], s[2 * NG];
  PairRegTables(const void* cs, const void* sn, const uint16_t* sign16) {
    for (int g = 0; g < NG; ++g) Src::group(cs, sn, sign16, g, c[2 * g], c[2 * g + 1], s[2 * g], s[2 * g + 1]);
  }
  __m512 cos(int i) const { return c[i]; }
  __m512 sin(int i) const { return s[i]; }
};

// ... or read where used (MemTables' role).
template <typename Src>
struct PairMemTables {
  const void* cs;
  const void* sn;
  const uint16_t* sign16;
  __m512 cos(int i) const {
    __m512 ce, co, se, so;
    Src::group(cs, sn, sign16, i / 2, ce, co, se, so);
    return i % 2 == 0 ? ce : co;
  }
  __m512 sin(int i) const {
    __m512 ce, co, se, so;
    Src::group(cs, sn, sign16, i / 2, ce, co, se, so);
    return i % 2 == 0 ? se : so;
  }
};

// The table values of group g of one table row for pair_row_words: read from the table rows per
// row (PairRowTables), or -- for bf16 tables -- the table row's words held in registers once per
// table row and split per row (PairWordTables: half the registers of PairRegTables; also the
// register tables of the other bf16-table pair rows). bf16 x [1, 24, 256, 128], one thread: 3D
// 44+44+40 BNSD / BSND 71 / 65 us with the table values read per row, 64.5 / 56 with
// PairWordTables; half BNSD 54.8 with PairRegTables, 52.5 with PairWordTables.
template <typename Src>
struct PairRowTables {
  const void* cs;
  const void* sn;
  const uint16_t* sign16;
  NPU_OPS_ROW_INLINE void group(int g, __m512& ce, __m512& co, __m512& se, __m512& so) const {
    Src::group(cs, sn, sign16, g, ce, co, se, so);
  }
};

template <int NG>
struct PairWordTables {
  __m512i c[NG], s[NG];
  PairWordTables(const void* cs, const void* sn, const uint16_t* sign16) {
    for (int g = 0; g < NG; ++g) {
      c[g] = _mm512_loadu_si512(static_cast<const c10::BFloat16*>(cs) + g * 2 * kLanes);
      s[g] = _mm512_xor_si512(_mm512_loadu_si512(static_cast<const c10::BFloat16*>(sn) + g * 2 * kLanes),
                              _mm512_loadu_si512(sign16 + g * 2 * kLanes));
    }
  }
  __m512 cos(int i) const { return i % 2 == 0 ? even_fp32(c[i / 2]) : odd_fp32(c[i / 2]); }
  __m512 sin(int i) const { return i % 2 == 0 ? even_fp32(s[i / 2]) : odd_fp32(s[i / 2]); }
  NPU_OPS_ROW_INLINE void group(int g, __m512& ce, __m512& co, __m512& se, __m512& so) const {
    ce = even_fp32(c[g]);
    co = odd_fp32(c[g]);
    se = even_fp32(s[g]);
    so = odd_fp32(s[g]);
  }
};

// One row, its table values read from memory; returns the subnormal- or NaN-result lanes when
// unchecked with AVX512_BF16 (then the caller redoes the row checked), else 0.
template <PairShape kShape, typename Src, bool kStream, bool kChecked>
NPU_OPS_ROW_INLINE uint32_t pair_row(const PairGroupPlan* groups, int64_t ngroups, const uint16_t* sign16,
                                     const c10::BFloat16* x, c10::BFloat16* out, const void* cs, const void* sn) {
  __mmask16 fixup = 0;
  for (int64_t g = 0; g < ngroups; ++g) {
    __m512 ce, co, se, so;
    Src::group(cs, sn, sign16, g, ce, co, se, so);
    pair_group<kShape, kStream, kChecked>(groups[g], g, x, out, ce, co, se, so, fixup);
  }
  return fixup;
}

// A row of NG <= 4 groups of 32 16-bit elements as words, in registers (groups past NG zero).
template <int NG>
NPU_OPS_ROW_INLINE void load_row_words(const void* x, __m512i w[4]) {
  static_assert(NG >= 1 && NG <= 4, "a row in registers has at most four groups");
  for (int g = 0; g < 4; ++g) {
    w[g] = g < NG ? _mm512_loadu_si512(static_cast<const char*>(x) + g * 4 * kLanes) : _mm512_setzero_si512();
  }
}

// The partners of group gp of a row held as words (load_row_words), in natural order: one or two
// two-source permutes of the row's pairs (PairGroupPlan::row_src), then, for kMixed, swapped within
// their pairs and zeroed as the group says. Dtype-blind: bf16 and fp16 rows alike.
template <PairShape kShape, int NG>
NPU_OPS_ROW_INLINE __m512i row_words_partners(const PairGroupPlan& gp, const __m512i w[4]) {
  const __m512i idx = _mm512_load_si512(gp.row_src);
  __m512i p = _mm512_permutex2var_epi32(w[0], idx, w[1]);
  if constexpr (NG > 2) {
    p = _mm512_mask_mov_epi32(p, static_cast<__mmask16>(gp.row_hi), _mm512_permutex2var_epi32(w[2], idx, w[3]));
  }
  if constexpr (kShape == PairShape::kMixed) {
    if (gp.swap != 0) p = _mm512_mask_rol_epi32(p, static_cast<__mmask16>(gp.swap), p, 16);
    if (gp.nonzero != 0xFFFFFFFFu) p = _mm512_maskz_mov_epi16(gp.nonzero, p);
  }
  return p;
}

// One row of NG <= 4 groups whose partners are any pairs of the row (kMixed, kUnswapped: the 3D
// modes and other permutations of pairs): the row's groups are loaded once into registers and
// each group's partners are one or two two-source permutes of them (PairGroupPlan::row_src), then
// swapped within their pairs and zeroed as the group says; the table values are read per group.
template <PairShape kShape, int NG, bool kStream, typename GroupTables>
NPU_OPS_ROW_INLINE uint32_t pair_row_words(const PairGroupPlan* groups, const c10::BFloat16* x, c10::BFloat16* out,
                                           const GroupTables& tables) {
  __m512i w[4];
  load_row_words<NG>(x, w);
  __mmask16 fixup = 0;
  for (int g = 0; g < NG; ++g) {
    const __m512i p = row_words_partners<kShape, NG>(groups[g], w);
    __m512 ce, co, se, so;
    tables.group(g, ce, co, se, so);
    const __m512 xe = even_fp32(w[g]), xo = odd_fp32(w[g]);
    pair_store<kStream, false>(out + g * 2 * kLanes, _mm512_add_ps(_mm512_mul_ps(xe, ce), _mm512_mul_ps(even_fp32(p), se)),
                               _mm512_add_ps(_mm512_mul_ps(xo, co), _mm512_mul_ps(odd_fp32(p), so)), fixup);
  }
  return fixup;
}

// table_run_rows for bf16 rows of NG groups in the pair layout: each table row in registers for
// batches of at least kRegTablesMinRows rows per table row (bf16 tables as the table row's words,
// half the registers, split per row; others as fp32), else read where used.
template <typename Src, int NG, typename Fast, typename Exact>
NPU_OPS_ROW_INLINE void pair_table_run_rows(const RotatePlan& plan, const RowBatch& b, void* scratch, Fast fast,
                                            Exact exact) {
  using T = c10::BFloat16;
  const uint16_t* sign16 = plan.sign16.data();
  if (b.hn >= kRegTablesMinRows) {
    const auto regs = [=](const void* cs, const void* sn) {
      if constexpr (std::is_same_v<Src, PairTablesBf16>) {
        return PairWordTables<NG>(cs, sn, sign16);
      } else {
        return PairRegTables<Src, NG>(cs, sn, sign16);
      }
    };
    table_run_rows<T>(plan, b, scratch, 64, regs, fast, exact);
  } else {
    const auto mem = [=](const void* cs, const void* sn) { return PairMemTables<Src>{cs, sn, sign16}; };
    table_run_rows<T>(plan, b, scratch, 64, mem, fast, exact);
  }
}

// bf16 x, the fixed permutations with a pair plan: the row as the pair rows split it (group g's
// even elements, then its odd ones, as fp32: one shift or AND each, no widening), the partners
// formed from those vectors as above, the tables in the pair rows' layout (PairWordTables,
// PairRegTables, PairMemTables) and the results rounded back by pairs (pair_store).
template <int K, bool kStream, bool kChecked, typename Tables, int... G>
NPU_OPS_ROW_INLINE uint32_t fixed_pair_row(const c10::BFloat16* x, c10::BFloat16* out, const Tables& t,
                                           std::integer_sequence<int, G...>) {
  __m512 v[8];
  ((v[2 * G] = even_fp32(_mm512_loadu_si512(x + G * 2 * kLanes)),
    v[2 * G + 1] = odd_fp32(_mm512_loadu_si512(x + G * 2 * kLanes))),
   ...);
  __mmask16 fixup = 0;
  ((pair_store<kStream, kChecked>(
       out + G * 2 * kLanes,
       _mm512_add_ps(_mm512_mul_ps(v[2 * G], t.cos(2 * G)), _mm512_mul_ps(fixed_partners<K, true, 2 * G>(v), t.sin(2 * G))),
       _mm512_add_ps(_mm512_mul_ps(v[2 * G + 1], t.cos(2 * G + 1)),
                     _mm512_mul_ps(fixed_partners<K, true, 2 * G + 1>(v), t.sin(2 * G + 1))),
       fixup)),
   ...);
  return fixup;
}

template <typename Src, int K>
void fixed_pair_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  using T = c10::BFloat16;
  using Groups = std::make_integer_sequence<int, 4>;
  const uint16_t* sign16 = plan.sign16.data();
  const auto fast = [](const T* x, T* out, const auto& t, const void*, const void*, auto stream) {
    return fixed_pair_row<K, decltype(stream)::value, false>(x, out, t, Groups{});
  };
  const auto exact = [=](const T* x, T* out, const void* cs, const void* sn, auto stream) {
    fixed_pair_row<K, decltype(stream)::value, true>(x, out, PairMemTables<Src>{cs, sn, sign16}, Groups{});
  };
  pair_table_run_rows<Src, 4>(plan, b, scratch, fast, exact);
}

template <typename Src, int... K>
RowsFn fixed_pair_rows_fn(int32_t k, std::integer_sequence<int, K...>) {
  RowsFn fn = nullptr;
  ((fn = k == K ? &fixed_pair_rows<Src, K> : fn), ...);
  return fn;
}

template <PairShape kShape, int NG, bool kStream, typename Tables>
NPU_OPS_ROW_INLINE uint32_t pair_row_regs(const PairGroupPlan* groups, const c10::BFloat16* x, c10::BFloat16* out,
                              const Tables& t) {
  __mmask16 fixup = 0;
  if constexpr (kShape == PairShape::kHalfRotation) {
    // Every group of the row is loaded and split once, and serves as its own group and as the
    // partners of group g + NG/2.
    __m512 xe[NG], xo[NG];
    for (int g = 0; g < NG; ++g) {
      const __m512i own = _mm512_loadu_si512(x + g * 2 * kLanes);
      xe[g] = even_fp32(own);
      xo[g] = odd_fp32(own);
    }
    for (int g = 0; g < NG; ++g) {
      const int p = (g + NG / 2) % NG;
      pair_store<kStream, false>(out + g * 2 * kLanes,
                                 _mm512_add_ps(_mm512_mul_ps(xe[g], t.cos(2 * g)), _mm512_mul_ps(xe[p], t.sin(2 * g))),
                                 _mm512_add_ps(_mm512_mul_ps(xo[g], t.cos(2 * g + 1)), _mm512_mul_ps(xo[p], t.sin(2 * g + 1))),
                                 fixup);
    }
    return fixup;
  }
  for (int g = 0; g < NG; ++g) {
    pair_group<kShape, kStream, false>(groups[g], g, x, out, t.cos(2 * g), t.cos(2 * g + 1), t.sin(2 * g),
                                       t.sin(2 * g + 1), fixup);
  }
  return fixup;
}

// pair_rows for NG groups per row with the tables in registers (or, for a batch of fewer rows per
// table row than kRegTablesMinRows, read where used); NG = 0: any number of groups, the table
// values read per group of each row.
template <PairShape kShape, typename Src, int NG>
void pair_rows_shaped(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  using T = c10::BFloat16;
  const int64_t ngroups = plan.D / (2 * kLanes);
  const PairGroupPlan* groups = plan.pair_groups.data();
  const uint16_t* sign16 = plan.sign16.data();
  constexpr bool kWords = kShape == PairShape::kMixed || kShape == PairShape::kUnswapped;
  const auto fast = [=](const T* x, T* out, const auto& t, const void* cs, const void* sn, auto stream) -> uint32_t {
    if constexpr (kWords && NG > 0) {
      if constexpr (std::is_same_v<std::decay_t<decltype(t)>, NoTables>) {
        return pair_row_words<kShape, NG, decltype(stream)::value>(groups, x, out, PairRowTables<Src>{cs, sn, sign16});
      } else {
        return pair_row_words<kShape, NG, decltype(stream)::value>(groups, x, out, t);
      }
    } else if constexpr (NG > 0) {
      return pair_row_regs<kShape, NG, decltype(stream)::value>(groups, x, out, t);
    } else {
      return pair_row<kShape, Src, decltype(stream)::value, false>(groups, ngroups, sign16, x, out, cs, sn);
    }
  };
  const auto exact = [=](const T* x, T* out, const void* cs, const void* sn, auto stream) {
    pair_row<kShape, Src, decltype(stream)::value, true>(groups, ngroups, sign16, x, out, cs, sn);
  };
  if constexpr (kWords && NG > 0) {
    if constexpr (std::is_same_v<Src, PairTablesBf16>) {
      if (b.hn >= kRegTablesMinRows) {
        const auto words = [=](const void* cs, const void* sn) { return PairWordTables<NG>(cs, sn, sign16); };
        return table_run_rows<T>(plan, b, scratch, 64, words, fast, exact);
      }
    }
    table_run_rows<T>(plan, b, scratch, 64, no_tables, fast, exact);  // table values read per group
  } else if constexpr (NG > 0) {
    pair_table_run_rows<Src, NG>(plan, b, scratch, fast, exact);
  } else {
    table_run_rows<T>(plan, b, scratch, 64, no_tables, fast, exact);
  }
}

// Rows of up to four groups: tables in registers where every group is an offset load or its own
// pairs swapped; mixed and unswapped plans (the 3D modes) hold the row in registers instead
// (pair_row_words) and read the tables per group (measured at x [1, 24, 256, 128], one thread: 3D
// 44+44+40 at 12.8 ns a row with a load per group kind, 9.8 with pair_row_words, no faster with
// the tables in registers too). Longer rows take the group kinds, tables read per group.
template <PairShape kShape, typename Src>
void pair_rows_sized(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  switch (plan.D / (2 * kLanes)) {
    case 1: return pair_rows_shaped<kShape, Src, 1>(plan, b, scratch);
    case 2: return pair_rows_shaped<kShape, Src, 2>(plan, b, scratch);
    case 3: return pair_rows_shaped<kShape, Src, 3>(plan, b, scratch);
    case 4: return pair_rows_shaped<kShape, Src, 4>(plan, b, scratch);
    default: return pair_rows_shaped<kShape, Src, 0>(plan, b, scratch);
  }
}

// bf16 x with a pair plan, the tables from pair_table_row (Src = PairTablesF32) or the caller's
// bf16 rows (PairTablesBf16).
template <typename Src>
void pair_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  switch (plan.pair_shape) {
    case PairShape::kAllSwapped: return pair_rows_sized<PairShape::kAllSwapped, Src>(plan, b, scratch);
    case PairShape::kAllOffset: return pair_rows_sized<PairShape::kAllOffset, Src>(plan, b, scratch);
    case PairShape::kHalfRotation: return pair_rows_sized<PairShape::kHalfRotation, Src>(plan, b, scratch);
    case PairShape::kUnswapped: return pair_rows_sized<PairShape::kUnswapped, Src>(plan, b, scratch);
    default: return pair_rows_sized<PairShape::kMixed, Src>(plan, b, scratch);
  }
}

// fp16 x with a pair plan whose groups take other pairs of the row (kMixed, kUnswapped: the 3D
// modes), D = 32 * NG: the row is held as words and each group's partners formed as the bf16 pair
// rows form them (row_words_partners: one or two word permutes per 32 elements, where the chunk
// rows need one or two per 16 and a masked move each), then both are converted by halves. The
// table values are natural-order fp32 chunks (ChunkTables / MemTables). fp16 rounding is exact
// for every value: no fixup. 3D 44+44+40, x [1, 24, S, 128], one thread, back-to-back calls:
// BSND 62 -> 55 us at S = 256 and 562 -> 488-532 us at S = 2048 against perm_rows_words; BNSD
// 74 -> 68-70 us at S = 256.
template <PairShape kShape, int NG, bool kStream, typename Tables>
NPU_OPS_ROW_INLINE uint32_t half_pair_row_words(const PairGroupPlan* groups, const c10::Half* x, c10::Half* out,
                                                const Tables& t) {
  using T = c10::Half;
  __m512i w[4];
  load_row_words<NG>(x, w);
  __mmask16 none = 0;
  for (int g = 0; g < NG; ++g) {
    const __m512i p = row_words_partners<kShape, NG>(groups[g], w);
    const __m512 xl = _mm512_cvtph_ps(_mm512_castsi512_si256(w[g]));
    const __m512 xh = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w[g], 1));
    const __m512 pl = _mm512_cvtph_ps(_mm512_castsi512_si256(p));
    const __m512 ph = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(p, 1));
    chunk_store<T, kStream, false>(out + g * 2 * kLanes,
                                   _mm512_add_ps(_mm512_mul_ps(xl, t.cos(2 * g)), _mm512_mul_ps(pl, t.sin(2 * g))), 0xFFFF,
                                   none);
    chunk_store<T, kStream, false>(out + (2 * g + 1) * kLanes,
                                   _mm512_add_ps(_mm512_mul_ps(xh, t.cos(2 * g + 1)), _mm512_mul_ps(ph, t.sin(2 * g + 1))),
                                   0xFFFF, none);
  }
  return 0;
}

template <PairShape kShape, typename Src, int NG>
void half_pair_rows(const RotatePlan& plan, const RowBatch& b, void* scratch) {
  using T = c10::Half;
  const PairGroupPlan* groups = plan.pair_groups.data();
  const auto fast = [=](const T* x, T* out, const auto& t, const void*, const void*, auto stream) {
    return half_pair_row_words<kShape, NG, decltype(stream)::value>(groups, x, out, t);
  };
  const auto never = [](const T*, T*, const void*, const void*, auto) {};  // fast never asks for a fixup
  chunk_table_run_rows<T, Src, 2 * NG>(plan, b, scratch, fast, never);
}

template <PairShape kShape, typename Src>
RowsFn half_pair_rows_sized(int64_t D) {
  switch (D / (2 * kLanes)) {
    case 1: return &half_pair_rows<kShape, Src, 1>;
    case 2: return &half_pair_rows<kShape, Src, 2>;
    case 3: return &half_pair_rows<kShape, Src, 3>;
    case 4: return &half_pair_rows<kShape, Src, 4>;
    default: return nullptr;
  }
}

// half_pair_rows for this plan, or nullptr where it has none (no pair plan, D not a multiple of 32
// up to 128, or groups that are offset loads or their own pairs: the chunk rows' forms), and for
// the half rotation, which the chunk rows hold in registers for less (half_row_regs; at D = 96,
// where its groups are not offsets of each other, x [1, 24, 512, 96] one thread: 50 against 78 us
// BSND, 64 against 99 BNSD).
template <typename Src>
RowsFn half_pair_rows_fn(const RotatePlan& plan) {
  if (plan.pair_groups.empty() || plan.D != plan.Dp || plan.chunks_half_rotation) return nullptr;
  switch (plan.pair_shape) {
    case PairShape::kMixed: return half_pair_rows_sized<PairShape::kMixed, Src>(plan.D);
    case PairShape::kUnswapped: return half_pair_rows_sized<PairShape::kUnswapped, Src>(plan.D);
    default: return nullptr;
  }
}

// A table row for pair_rows: each group of 32 as its 16 even elements then its 16 odd ones, fp32,
// with sign_bits (natural order) XORed in the same arrangement.
template <typename T>
void pair_table_row(const void* src, int64_t D, int64_t, const uint32_t* sign_bits, void* dst_v) {
  alignas(64) static constexpr int32_t kEven[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  alignas(64) static constexpr int32_t kOdd[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  const __m512i even = _mm512_load_si512(kEven), odd = _mm512_load_si512(kOdd);
  const T* p = static_cast<const T*>(src);
  float* dst = static_cast<float*>(dst_v);
  for (int64_t j = 0; j < D; j += 2 * kLanes) {
    __m512i lo = _mm512_castps_si512(Io<T>::load(p + j, 0xFFFF));
    __m512i hi = _mm512_castps_si512(Io<T>::load(p + j + kLanes, 0xFFFF));
    if (sign_bits != nullptr) {
      lo = _mm512_xor_si512(lo, _mm512_loadu_si512(sign_bits + j));
      hi = _mm512_xor_si512(hi, _mm512_loadu_si512(sign_bits + j + kLanes));
    }
    _mm512_storeu_si512(dst + j, _mm512_permutex2var_epi32(lo, even, hi));
    _mm512_storeu_si512(dst + j + kLanes, _mm512_permutex2var_epi32(lo, odd, hi));
  }
}

template <typename T>
void table_row(const void* src, int64_t D, int64_t Dp, const uint32_t* sign_bits, void* dst_v) {
  const T* p = static_cast<const T*>(src);
  float* dst = static_cast<float*>(dst_v);
  for (int64_t j = 0; j < Dp; j += kLanes) {
    __m512 v = Io<T>::load(p + j, lane_mask(D - j));
    if (sign_bits != nullptr) {
      v = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_loadu_si512(sign_bits + j)));
    }
    _mm512_storeu_ps(dst + j, v);
  }
}

template <typename T>
RowsChoice pick(const RotatePlan& plan, bool raw_tables) {
  if (!plan.is_perm) {
#ifdef NPU_OPS_NATIVE_BF16
    if (std::is_same_v<T, c10::BFloat16> && !plan.y_bf16_pairs.empty()) return {&dense_rows_dpbf16, "dense-dpbf16"};
#endif
    return {&dense_rows<T>, "dense"};
  }
  // The fixed rows where the plan is one of the fixed permutations: for bf16 x with a pair plan in
  // the pair rows' layout (tables as the pair rows take them), else in natural order (tables of
  // x's dtype as they are, raw_tables, or fp32 rows converted per call).
  if (plan.fixed_perm >= 0) {
    constexpr auto kAll = std::make_integer_sequence<int, kNumFixedPerms>{};
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      if (!plan.pair_groups.empty()) {
        return {raw_tables ? fixed_pair_rows_fn<PairTablesBf16>(plan.fixed_perm, kAll)
                           : fixed_pair_rows_fn<PairTablesF32>(plan.fixed_perm, kAll),
                "fixed-pairs"};
      }
    }
    if (raw_tables) return {fixed_rows_fn<T, ChunkTablesRaw<T>>(plan.fixed_perm, kAll), "fixed"};
    return {fixed_rows_fn<T, ChunkTablesF32>(plan.fixed_perm, kAll), "fixed"};
  }
  if (std::is_same_v<T, c10::BFloat16> && !plan.pair_groups.empty()) {
    return {raw_tables ? &pair_rows<PairTablesBf16> : &pair_rows<PairTablesF32>, "pairs"};
  }
  // fp16 x reads raw tables only with the half rotation or the interleave swap (raw_tables), which
  // the chunk rows take: the fp16 pair rows always read fp32 tables.
  if constexpr (std::is_same_v<T, c10::Half>) {
    const RowsFn words = raw_tables ? nullptr : half_pair_rows_fn<ChunkTablesF32>(plan);
    if (words != nullptr) return {words, "pairs"};
  }
  const bool in_registers = plan.D == plan.Dp && plan.D <= kRowChunks * kLanes;  // perm_rows_words
  for (const ChunkPlan& c : plan.chunks) {
    if (c.kind == static_cast<int32_t>(ChunkKind::kGather) && !in_registers) {
      return {&perm_rows_buffered<T>, "chunks-buffered"};
    }
  }
  if (raw_tables) return {&perm_rows_direct<T, ChunkTablesRaw<T>>, "chunks"};
  return {&perm_rows_direct<T, ChunkTablesF32>, "chunks"};
}

inline RowsChoice rows_fn(at::ScalarType t, const RotatePlan& plan, bool raw_tables) {
  switch (t) {
    case at::kBFloat16: return pick<c10::BFloat16>(plan, raw_tables);
    case at::kHalf: return pick<c10::Half>(plan, raw_tables);
    case at::kFloat: return pick<float>(plan, raw_tables);
    default: return {nullptr, nullptr};
  }
}

// The table rows that rows_fn's kernel reads: pair_rows takes its tables even/odd, or (raw_tables)
// the caller's rows as they are (no function).
inline TableFn table_fn(at::ScalarType t, at::ScalarType x_dtype, const RotatePlan& plan, bool raw_tables) {
  if (raw_tables) return nullptr;
  const bool pairs = x_dtype == at::kBFloat16 && plan.is_perm && !plan.pair_groups.empty();
  switch (t) {
    case at::kBFloat16: return pairs ? &pair_table_row<c10::BFloat16> : &table_row<c10::BFloat16>;
    case at::kHalf: return pairs ? &pair_table_row<c10::Half> : &table_row<c10::Half>;
    case at::kFloat: return pairs ? &pair_table_row<float> : &table_row<float>;
    default: return nullptr;
  }
}

}  // namespace NPU_OPS_AVX512_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
