// The chunk rows (16 fp32 lanes per chunk; ChunkPlan): half rotation and interleave swap held in
// registers, any permutation of a row in registers, the fixed permutations of fixed_perms.h, and
// the general rows (offset loads, masked runs, permutes, gathers from an fp32 copy of the row).
//
// Part of rows_avx512_impl.h (one ISA namespace per including file, under its target pragma);
// included only from there, in this order: common, chunks, dense, pairs.
#pragma once

namespace npu_ops_transformer_ext {
namespace cpu {
namespace NPU_OPS_AVX512_NS {

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

}  // namespace NPU_OPS_AVX512_NS
}  // namespace cpu
}  // namespace npu_ops_transformer_ext
