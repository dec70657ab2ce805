// AVX-512 row kernels, included by rows_avx512.cpp (AVX-512F/BW/VL/DQ) and by
// rows_avx512_bf16.cpp (the same plus AVX512_BF16, NPU_OPS_NATIVE_BF16 defined), each under a
// target pragma; rows_generic.cpp calls in here only on a CPU that has the ISA. The kernels are in
// rows_avx512_common.h (loads, stores, tables, row loops), rows_avx512_chunks.h (16-lane chunk rows
// and the fixed permutations), rows_avx512_dense.h (dense mat) and rows_avx512_pairs.h (bf16 pair
// rows, fp16 word rows); this file converts table rows and picks the kernel for a plan.
//
// Every kernel computes x*cos and xp*sin as two multiplies and one add (explicit intrinsics,
// compiled with -ffp-contract=off, so no FMA can appear), and rounds once to x.dtype:
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

#include "cpu_kernel/rows_avx512_common.h"
#include "cpu_kernel/rows_avx512_chunks.h"
#include "cpu_kernel/rows_avx512_dense.h"
#include "cpu_kernel/rows_avx512_pairs.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace NPU_OPS_AVX512_NS {

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
