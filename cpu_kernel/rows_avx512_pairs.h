// The pair rows: bf16 x as 32-bit pairs split into even and odd fp32 (PairGroupPlan), their tables
// and the fixed permutations in that layout, and the fp16 rows that form partners as words.
//
// Part of rows_avx512_impl.h (one ISA namespace per including file, under its target pragma);
// included only from there, in this order: common, chunks, dense, pairs.
#pragma once

namespace npu_ops_transformer_ext {
namespace cpu {
namespace NPU_OPS_AVX512_NS {

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

}  // namespace NPU_OPS_AVX512_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
