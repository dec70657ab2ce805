// The building blocks every AVX-512 row kernel uses: loads and stores of 16 elements as fp32 with
// the exact roundings, prefetch, a chunk's partners and store, the table sources (registers,
// memory) and the row loops that walk a batch.
//
// Part of rows_avx512_impl.h (one ISA namespace per including file, under its target pragma);
// included only from there, in this order: common, chunks, dense, pairs.
#pragma once

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

}  // namespace NPU_OPS_AVX512_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
