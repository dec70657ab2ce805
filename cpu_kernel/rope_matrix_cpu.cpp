// The native CPU implementation of rope_matrix, rope_matrix_qk and rope_matrix_ (CPU dispatch key).
//
// Loop order. The dims of x (all but the last) split into
//   table dims:     where sin or cos varies (size > 1), e.g. S for [1, 1, S, D] tables;
//   broadcast dims: where both tables are broadcast, e.g. B and N.
// Work is cut into blocks of R consecutive table rows (R up to 128 at D = 128, fewer when that
// gives every thread 2 blocks). A block converts its cos/sin rows to the
// compute type once (small enough to stay in L2; tables of x's own dtype are read as they are by
// the rows that convert them in registers, see raw_tables), then runs over every broadcast position (every head and batch, of q and of
// k) for those R table rows, as the NPU kernel reuses its UB copy of the tables across B*N. A batch
// (RowBatch) is the block's R table rows for a few positions -- two to four heads in turn (BNSD), or all
// heads when they are adjacent rows of x (BSND) -- so each table row, loaded once into registers,
// serves the rows of every position of the batch. Blocks (and, when there are few of them, slices of
// the broadcast positions) are spread over threads with at::parallel_for.
#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>
#define NPU_OPS_HAVE_MXCSR 1
#elif defined(__aarch64__)
#define NPU_OPS_HAVE_FPCR 1
#endif

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cpu_kernel/cpu_tuning.h"
#include "cpu_kernel/output_cache.h"
#include "cpu_kernel/parallel_rule.h"
#include "cpu_kernel/rotate_plan.h"
#include "cpu_kernel/rows.h"
#include "validation/rope_matrix_validate.h"

namespace npu_ops_transformer_ext {
namespace cpu {

namespace {

// cos + sin rows of one block in the compute type: sized for L2, so that each head's run of x rows
// in a block is long (R = 128 rows = 32 KiB of bf16 for D = 128) and streams well from DRAM.
constexpr int64_t kTableBlockBytes = 128 * 1024;
constexpr int64_t kMaxBlockRows = 256;
// Block rows of a call of 16-bit x whose output is streamed (DRAM-sized), and on some CPUs of fp32
// x whose heads lie apart (CpuTuning::wide_streamed_long_blocks): each head's run of x rows in a
// block is then 256 KiB (D = 128, bf16) instead of 32. Measured on the 2-core AMD Zen 5, 2 threads,
// x [1, 24, S, 128] BNSD, ratio to the memory limit with 128 / 1024 rows, both and the limit timed
// round-robin in one process (two processes each): S = 32768 (192 MiB) bf16 half 1.114 / 1.109 and
// 1.121 / 1.107, fp16 interleave 1.124 / 1.098 and 1.085 / 1.074, bf16 x with fp32 tables 1.174 /
// 1.133 and 1.175 / 1.134; S = 16384 fp16 interleave 1.083 / 1.075 and 1.088 / 1.069. (Across
// processes, whose DRAM speed differs, 2048 rows looked better still at 192 MiB but worse at 96
// MiB.) fp32 x gained nothing there, on Zen 4 it does (cpu_tuning.cpp); fp32 BSND, on Zen 4, one
// thread, 128 / 512 / 1024 rows: S = 4096 1.24 / 1.25 / 1.27, 32768 1.28 / 1.28 / 1.34.
constexpr int64_t kStreamBlockRows = 1024;
// ... but no more than this many bytes of converted table rows (1024 rows of D = 128 in fp32): a
// block of 1024 rows of a D = 8192 head would hold 64 MiB per thread.
constexpr int64_t kStreamTableBytes = 1024 * 1024;
// Work items per thread: few, since every batch of a block costs a call into the row kernel (x
// [1, 24, 256, 128] bf16, 2 threads: 23.7-24.9 us with 1 or 2 items a thread, 25-29.5 with 8;
// no change at 6 MiB and up, where the blocks are kTableBlockBytes anyway).
constexpr int64_t kItemsPerThread = 2;
// Broadcast positions (heads) whose rows one batch interleaves, row by row, when they are far apart
// in x (BNSD): each table row, loaded once, serves that many x rows. How many depends on the CPU and
// the call (cpu_tuning(), cpu_tuning.cpp). Heads that are adjacent rows of x (BSND) all go in one
// batch, up to kMaxHeadsPerBatch: x is then read straight through.
constexpr int64_t kMaxHeadsPerBatch = 64;
// Calls of 16-bit x up to this many bytes of x (all operands) do not prefetch x rows in software:
// their x is usually in cache, where the prefetch instructions only cost issue slots. Measured on
// the 2-core AMD Zen 5 development machine, x [1, 24, S, 128], 2 threads, half and 3D, three alternating
// runs each: bf16 and fp16 were 5-12 % faster without prefetching from S = 256 to 1024 (1.5 to
// 6 MiB; BNSD bf16 at 3 and 6 MiB alike either way), equal or slower from S = 2048 (12 MiB; BNSD
// 1.15x slower there, 1.3-1.5x at 48 MiB); fp32 x (512-byte rows) was 2-6 % faster with prefetching
// already at 3 MiB.
constexpr int64_t kNoPrefetchBytes16 = 6 << 20;

// Per-dim lists of a call: no heap allocation up to this rank (a decode call is a few
// microseconds, and each allocation a noticeable part of it).
using Dims = c10::SmallVector<int64_t, 8>;

// One x (and its output) of the call: rope_matrix has one, rope_matrix_qk two.
struct Operand {
  const char* x_base;
  char* out_base;
  int64_t elem;                        // bytes per element
  // table dims (same list for every operand), strides in elements; any rank
  Dims t_xstride, t_ostride;
  // broadcast dims of this operand
  int nb = 0;
  Dims b_size, b_xstride, b_ostride;
  int64_t nbc = 1;                     // number of broadcast positions
};

using Operands = c10::SmallVector<Operand, 2>;

struct Tables {
  int nt = 0;
  Dims t_size, sin_stride, cos_stride;
  int64_t ntr = 1;  // number of table rows
  const char* sin_base;
  const char* cos_base;
  at::ScalarType sin_dtype, cos_dtype;
};

int64_t elem_size(at::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

// Splits x's dims into table dims and broadcast dims (aligned from the right, last dim excluded).
// Table dims are taken from the tables; every operand has the same table dims.
Tables describe_tables(const at::Tensor& sin, const at::Tensor& cos, int rank) {
  Tables t;
  t.sin_base = static_cast<const char*>(sin.const_data_ptr());
  t.cos_base = static_cast<const char*>(cos.const_data_ptr());
  t.sin_dtype = sin.scalar_type();
  t.cos_dtype = cos.scalar_type();
  for (int k = rank - 1; k >= 1; --k) {  // k: distance from the last dim, outermost first
    const int64_t ss = sin.dim() > k ? sin.size(-1 - k) : 1;
    const int64_t cs = cos.dim() > k ? cos.size(-1 - k) : 1;
    if (ss == 1 && cs == 1) continue;
    t.t_size.push_back(std::max(ss, cs));
    t.sin_stride.push_back(ss == 1 ? 0 : sin.stride(-1 - k));
    t.cos_stride.push_back(cs == 1 ? 0 : cos.stride(-1 - k));
    t.ntr *= t.t_size.back();
    ++t.nt;
  }
  return t;
}

Operand describe_operand(const at::Tensor& x, const at::Tensor& out, const at::Tensor& sin,
                         const at::Tensor& cos) {
  Operand o;
  o.x_base = static_cast<const char*>(x.const_data_ptr());
  o.out_base = static_cast<char*>(out.data_ptr());
  o.elem = elem_size(x.scalar_type());
  const int rank = static_cast<int>(x.dim());
  for (int k = rank - 1; k >= 1; --k) {
    const int d = rank - 1 - k;
    const int64_t ss = sin.dim() > k ? sin.size(-1 - k) : 1;
    const int64_t cs = cos.dim() > k ? cos.size(-1 - k) : 1;
    if (ss > 1 || cs > 1) {
      o.t_xstride.push_back(x.stride(d));
      o.t_ostride.push_back(out.stride(d));
    } else if (x.size(d) > 1) {
      o.b_size.push_back(x.size(d));
      o.b_xstride.push_back(x.stride(d));
      o.b_ostride.push_back(out.stride(d));
      o.nbc *= x.size(d);
      ++o.nb;
    }
  }
  return o;
}

// Whether the operand's innermost broadcast positions (heads) are adjacent rows of x and of the
// output (BSND), rather than apart (BNSD) or absent.
bool heads_adjacent(const Operand& o, int64_t D) {
  return o.nb > 0 && o.b_xstride[o.nb - 1] == D && o.b_ostride[o.nb - 1] == D;
}

// Sets idx to the multi-index of linear position `pos` over sizes[0..n) (last fastest).
inline void unravel(int64_t pos, int n, const int64_t* size, int64_t* idx) {
  for (int d = n - 1; d >= 0; --d) {
    idx[d] = pos % size[d];
    pos /= size[d];
  }
}

inline void advance(int n, const int64_t* size, int64_t* idx) {
  for (int d = n - 1; d >= 0; --d) {
    if (++idx[d] < size[d]) return;
    idx[d] = 0;
  }
}

// The floating-point control word's flush bits: torch.set_flush_denormal sets them in the
// calling thread's register only (x86: MXCSR FTZ and DAZ; aarch64: FPCR.FZ; elsewhere it changes
// nothing and returns False, and neither does the kernel).
#if defined(NPU_OPS_HAVE_MXCSR)
using FpControl = unsigned;
constexpr FpControl kFlushBits = 0x8040u;
inline FpControl read_fp_control() { return _mm_getcsr(); }
inline void write_fp_control(FpControl v) { _mm_setcsr(v); }
#elif defined(NPU_OPS_HAVE_FPCR)
using FpControl = uint64_t;
constexpr FpControl kFlushBits = FpControl{1} << 24;
inline FpControl read_fp_control() {
  FpControl v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}
inline void write_fp_control(FpControl v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }
#else
using FpControl = unsigned;
constexpr FpControl kFlushBits = 0;
inline FpControl read_fp_control() { return 0; }
inline void write_fp_control(FpControl) {}
#endif

// A worker thread of at::parallel_for keeps the flush bits it had when it was created. So that a
// call flushes subnormals exactly when its calling thread does, whichever threads compute its
// rows, each work range runs with the caller's bits and gives the worker its own back afterwards.
class DenormalModeOf {
 public:
  explicit DenormalModeOf(FpControl caller_bits) : saved_(read_fp_control()) {
    if ((saved_ & kFlushBits) != caller_bits) write_fp_control((saved_ & ~kFlushBits) | caller_bits);
  }
  ~DenormalModeOf() {
    if (read_fp_control() != saved_) write_fp_control(saved_);
  }
  DenormalModeOf(const DenormalModeOf&) = delete;
  DenormalModeOf& operator=(const DenormalModeOf&) = delete;
  static FpControl caller_bits() { return read_fp_control() & kFlushBits; }

 private:
  FpControl saved_;
};

// A broadcast position of one operand: bytes from the operand's bases to its first row.
struct Position {
  size_t op;
  int64_t x_off, out_off;
};

// Per-thread buffers of run_blocks, kept from call to call: a call of the size of the last ones
// allocates nothing, which matters at decode sizes, where a call is a few microseconds. A buffer
// more than 4 times larger than needed and over kKeepBytes (left by a much larger call) is given
// back, so a thread does not hold a large call's memory for its life.
struct Workspace {
  std::vector<char> mem;  // row-kernel scratch, then the block's table rows in the compute type
  std::vector<int64_t> xt_off, ot_off;
  std::vector<const void*> cosrow, sinrow;
  std::vector<Position> positions;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<const char*> xhead[2];  // position bases of this batch and of the next one
  std::vector<char*> ohead[2];
  std::vector<int64_t> tidx, bidx;
};

// The calling thread's Workspace (not inlined: the caller then holds its address in a register
// instead of looking the thread-local variable up again at every use).
__attribute__((noinline)) Workspace& thread_workspace() {
  thread_local Workspace ws;
  return ws;
}

constexpr size_t kKeepBytes = size_t(1) << 20;

// v with capacity for n elements (see Workspace).
template <typename V>
void fit(V& v, size_t n) {
  if (v.capacity() > 4 * n && v.capacity() * sizeof(typename V::value_type) > kKeepBytes) V().swap(v);
}

// v with at least n elements (see Workspace).
template <typename V>
void grow(V& v, size_t n) {
  fit(v, n);
  if (v.size() < n) v.resize(n);
}

template <typename C>
void run_blocks(const RotatePlan& plan, const Tables& tab, Operands& ops, const Kernels& k,
                bool stream, bool in_place, bool apart) {
  const int64_t D = plan.D, Dp = plan.Dp;
  // Enough work items to keep every thread busy: kItemsPerThread each. Blocks first: each table
  // row is then converted once per call. A block has up to kTableBlockBytes of converted rows, but
  // no more rows than give `want` blocks (a 1.5 MiB call on 2 threads has 256 rows: 4 blocks of 64,
  // not 2 of 128 whose table rows every slice of the heads would convert again) and no more than
  // the tables have (the per-call buffers below are sized by R; a decode call has one table row).
  // Only when there are fewer table rows than work items are the broadcast positions sliced too.
  // A call small enough to run on the calling thread wants one item: slices would only convert the
  // same table rows again.
  int64_t elems = 0;
  for (const auto& o : ops) elems += o.nbc * tab.ntr * D;
  const bool parallel = elems >= kMinParallelElems;
  const int64_t x_elem = ops.front().elem;
  const bool prefetch = !(x_elem == 2 && elems * x_elem <= kNoPrefetchBytes16);
  const int64_t want = parallel ? kItemsPerThread * static_cast<int64_t>(at::get_num_threads()) : 1;
  const CpuTuning& tuning = cpu_tuning();
  const int64_t r_cap =
      stream && (x_elem == 2 || (apart && tuning.wide_streamed_long_blocks))
          ? std::clamp<int64_t>(kStreamTableBytes / (2 * Dp * static_cast<int64_t>(sizeof(C))), 1, kStreamBlockRows)
          : std::clamp<int64_t>(kTableBlockBytes / (2 * Dp * static_cast<int64_t>(sizeof(C))), 1, kMaxBlockRows);
  const int64_t R = std::clamp<int64_t>((tab.ntr + want - 1) / want, 1, r_cap);
  const int64_t nblocks = (tab.ntr + R - 1) / R;
  int64_t max_nbc = 1;
  int max_nb = 0;
  for (const auto& o : ops) {
    max_nbc = std::max(max_nbc, o.nbc);
    max_nb = std::max(max_nb, o.nb);
  }
  const int64_t nslices = std::clamp<int64_t>((want + nblocks - 1) / nblocks, 1, max_nbc);
  const uint32_t* sign_bits = plan.is_perm ? plan.sign_bits.data() : nullptr;
  // Broadcast positions per batch, per operand: where the heads of one table row are adjacent rows
  // of x and of the output (BSND), all of them (up to kMaxHeadsPerBatch), so x is read straight
  // through; otherwise (BNSD) as many as the CPU's CpuTuning says.
  Dims heads_per_batch;
  int64_t max_heads = 1;
  for (const auto& o : ops) {
    const int64_t apart_heads = o.elem == 2 ? tuning.heads_16
                                : !stream   ? tuning.heads_wide_cached
                                : tab.ntr * D * o.elem <= kShortHeadBytes ? tuning.heads_wide_streamed
                                                                          : tuning.heads_wide_streamed_long;
    heads_per_batch.push_back(heads_adjacent(o, D) ? std::min(o.b_size[o.nb - 1], kMaxHeadsPerBatch) : apart_heads);
    max_heads = std::max(max_heads, heads_per_batch.back());
  }

  // A small call runs on the calling thread: waking the others costs more than they save.
  const int64_t items = nblocks * nslices;
  const auto denormal_bits = DenormalModeOf::caller_bits();
  at::parallel_for(0, items, parallel ? 1 : items, [&](int64_t begin, int64_t end) {
    const DenormalModeOf denormal_mode(denormal_bits);
    const int64_t scratch_len = kScratchRows * (Dp + kLanes) * static_cast<int64_t>(sizeof(double));
    const int64_t tab_len = 2 * R * Dp;
    Workspace& ws = thread_workspace();
    grow(ws.mem, static_cast<size_t>(scratch_len + tab_len * static_cast<int64_t>(sizeof(C)) + 64));
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(ws.mem.data()) + 63) & ~uintptr_t(63));
    void* scratch = aligned;
    C* tabbuf = reinterpret_cast<C*>(aligned + scratch_len);
    const size_t nops = ops.size();
    grow(ws.xt_off, nops * R);
    grow(ws.ot_off, nops * R);
    grow(ws.cosrow, R);
    grow(ws.sinrow, R);
    int64_t* const xt_off = ws.xt_off.data();  // [operand * R + row of the block]
    int64_t* const ot_off = ws.ot_off.data();
    const void** const cosrow = ws.cosrow.data();
    const void** const sinrow = ws.sinrow.data();
    std::vector<Position>& positions = ws.positions;
    std::vector<std::pair<size_t, size_t>>& ranges = ws.ranges;  // batches: [first, last) positions
    for (int i = 0; i < 2; ++i) {
      grow(ws.xhead[i], static_cast<size_t>(max_heads));
      grow(ws.ohead[i], static_cast<size_t>(max_heads));
    }
    grow(ws.tidx, static_cast<size_t>(tab.nt));
    grow(ws.bidx, static_cast<size_t>(max_nb));
    int64_t* const tidx = ws.tidx.data();
    int64_t* const bidx = ws.bidx.data();

    for (int64_t item = begin; item < end; ++item) {
      const int64_t blk = item / nslices, slice = item % nslices;
      const int64_t t0 = blk * R;
      const int64_t nr = std::min(R, tab.ntr - t0);
      // Offsets of the block's table rows, and its table rows in the compute type (or as they are).
      unravel(t0, tab.nt, tab.t_size.data(), tidx);
      for (int64_t r = 0; r < nr; ++r) {
        int64_t so = 0, co = 0;
        for (int d = 0; d < tab.nt; ++d) {
          so += tidx[d] * tab.sin_stride[d];
          co += tidx[d] * tab.cos_stride[d];
        }
        for (size_t i = 0; i < ops.size(); ++i) {
          int64_t xo = 0, oo = 0;
          for (int d = 0; d < tab.nt; ++d) {
            xo += tidx[d] * ops[i].t_xstride[d];
            oo += tidx[d] * ops[i].t_ostride[d];
          }
          xt_off[i * R + r] = xo * ops[i].elem;
          ot_off[i * R + r] = oo * ops[i].elem;
        }
        const char* csrc = tab.cos_base + co * elem_size(tab.cos_dtype);
        const char* ssrc = tab.sin_base + so * elem_size(tab.sin_dtype);
        if (k.cos_table == nullptr) {  // the row kernel reads the caller's rows (raw_tables)
          cosrow[r] = csrc;
          sinrow[r] = ssrc;
        } else {
          C* cbuf = tabbuf + (2 * r) * Dp;
          C* sbuf = cbuf + Dp;
          k.cos_table(csrc, D, Dp, nullptr, cbuf);
          k.sin_table(ssrc, D, Dp, sign_bits, sbuf);
          cosrow[r] = cbuf;
          sinrow[r] = sbuf;
        }
        advance(tab.nt, tab.t_size.data(), tidx);
      }
      // Every broadcast position of every operand in this slice, heads_per_batch of them per batch
      // with their rows ordered (table row, position): each table row is read from L2 once for
      // that many rows of x, and each position's rows still run on for R rows, long enough for
      // the prefetchers. Each batch is given the next one's x rows for prefetching.
      positions.clear();
      ranges.clear();
      for (size_t i = 0; i < ops.size(); ++i) {
        const Operand& o = ops[i];
        const int64_t b0 = slice * o.nbc / nslices, b1 = (slice + 1) * o.nbc / nslices;
        if (b0 >= b1) continue;
        unravel(b0, o.nb, o.b_size.data(), bidx);
        const size_t first = positions.size();
        for (int64_t bpos = b0; bpos < b1; ++bpos) {
          int64_t xb = 0, ob = 0;
          for (int d = 0; d < o.nb; ++d) {
            xb += bidx[d] * o.b_xstride[d];
            ob += bidx[d] * o.b_ostride[d];
          }
          positions.push_back({i, xb * o.elem, ob * o.elem});
          advance(o.nb, o.b_size.data(), bidx);
        }
        for (size_t p = first; p < positions.size(); p += heads_per_batch[i]) {
          ranges.push_back({p, std::min(positions.size(), p + static_cast<size_t>(heads_per_batch[i]))});
        }
      }
      const size_t nbatches = ranges.size();
      // Fills the position bases of batch t into slot t % 2 (batch t + 1's are filled while batch
      // t runs, for its prefetching); returns the batch's number of positions.
      const auto fill_heads = [&](size_t t) -> int64_t {
        const auto [p0, p1] = ranges[t];
        const Operand& o = ops[positions[p0].op];
        for (size_t p = p0; p < p1; ++p) {
          ws.xhead[t % 2][p - p0] = o.x_base + positions[p].x_off;
          ws.ohead[t % 2][p - p0] = o.out_base + positions[p].out_off;
        }
        return static_cast<int64_t>(p1 - p0);
      };
      int64_t hn = nbatches > 0 ? fill_heads(0) : 0;
      for (size_t t = 0; t < nbatches; ++t) {
        const size_t op = positions[ranges[t].first].op;
        RowBatch rb{nr, hn, ws.xhead[t % 2].data(), ws.ohead[t % 2].data(), xt_off + op * R, ot_off + op * R,
                    cosrow, sinrow, stream, in_place, prefetch};
        if (t + 1 < nbatches) {
          rb.next_hn = fill_heads(t + 1);
          rb.next_x_head = ws.xhead[(t + 1) % 2].data();
          rb.next_x_off = xt_off + positions[ranges[t + 1].first].op * R;
          rb.next_nr = nr;
        }
        k.rows(plan, rb, scratch);
        hn = rb.next_hn;
      }
    }
    // A work item of very many broadcast positions (e.g. [2^26, 2] x with [D] tables: 24 bytes of
    // positions per row) does not leave them to the thread: after every item they are at most
    // kKeepBytes.
    fit(positions, 0);
    fit(ranges, 0);
  });
}

// A new contiguous output (large ones from the output cache, see output_cache.h).
at::Tensor new_output(const at::Tensor& like) { return empty_output(like.sizes(), like.scalar_type()); }

// x with unit stride in its last dim (the row kernels read rows as contiguous runs).
at::Tensor rows_contiguous(const at::Tensor& t) {
  return (t.size(-1) <= 1 || t.stride(-1) == 1) ? t : t.contiguous();
}

// Large outputs are written with non-temporal stores (they cannot stay in cache anyway, and
// streaming them skips reading each output line from memory before writing it): where the heads of
// a call are adjacent rows (BSND), from a size tuned per CPU (CpuTuning::stream_bytes_adjacent,
// cpu_tuning.cpp); where they lie apart in x and in the output (BNSD), from these sizes (two threads
// or more, one thread): such a batch writes several output runs at once, and with ordinary stores
// each of their lines is read before it is written. Measured on the 2-core AMD Zen 5 development
// machine, x [1, 24, S, 128] BNSD, the op with ordinary and with non-temporal stores timed
// round-robin in a shuffled order in one process, with the limit's temporal copy only (us, ordinary
// / non-temporal):
// 2 threads, bf16 half 9 MiB 198 / 227, 10.5 MiB 283 / 269, 12 MiB 330 / 312; bf16 3D 7.5 MiB
// 201 / 190, 10.5 MiB 333 / 269; fp32 half 9 MiB 179 / 233, fp32 3D 10.5 MiB 279 / 275; 1 thread,
// bf16 half 6 MiB 270 / 171. With the limit's non-temporal copy in the rotation too (as in the
// sweep), whose output buffer the next call may reuse out of cache, streaming gains more: 2
// threads bf16 half 9 MiB 248 / 233, 15 MiB 484 / 430, 3D 8.25 MiB 292 / 209, fp32 half 9 MiB
// 259 / 234; 1 thread bf16 half 7.5 MiB 376 / 218, fp32 3D 9 MiB 452 / 246. (BSND, 2 threads, in
// that rotation: bf16 half 9 MiB 194 / 228, 12 MiB 263 / 309, 15 MiB 436 / 425: ordinary stores
// stay ahead below 16 MiB there, cpu_tuning.cpp.)
constexpr int64_t kStreamBytesApart = 12 << 20;
constexpr int64_t kStreamBytesApartOneThread = 8 << 20;

// Runs the kernel for every (x, out) pair with one plan and one pass over the tables.
void run(const std::vector<std::pair<at::Tensor, at::Tensor>>& xs, const at::Tensor& y,
         const at::Tensor& sin_in, const at::Tensor& cos_in) {
  const at::Tensor& x0 = xs.front().first;
  int64_t numel = 0;
  for (const auto& p : xs) numel += p.first.numel();
  if (numel == 0) return check_isa_setting();  // an invalid setting fails every call alike
  const std::shared_ptr<const RotatePlan> plan_ptr = cached_rotate_plan(y);
  const RotatePlan& plan = *plan_ptr;
  const at::Tensor sin = rows_contiguous(sin_in), cos = rows_contiguous(cos_in);
  const int rank = static_cast<int>(std::max<int64_t>({x0.dim(), sin.dim(), cos.dim()}));
  const Tables tab = describe_tables(sin, cos, rank);
  Operands ops;
  for (const auto& p : xs) {
    if (p.first.numel() > 0) ops.push_back(describe_operand(p.first, p.second, sin, cos));
  }
  bool in_place = false;
  int64_t out_bytes = 0;
  for (const auto& p : xs) {
    in_place = in_place || p.first.is_same(p.second);
    out_bytes += p.second.nbytes();
  }
  // In place, the lines are in cache already: nothing to gain from streaming.
  const bool one_thread = at::get_num_threads() == 1 || at::in_parallel_region();
  bool apart = false;
  for (const Operand& o : ops) apart = apart || (o.nb > 0 && !heads_adjacent(o, x0.size(-1)));
  const CpuTuning& tuning = cpu_tuning();
  const int64_t stream_from = apart ? (one_thread ? kStreamBytesApartOneThread : kStreamBytesApart)
                                    : (one_thread ? tuning.stream_bytes_adjacent_one_thread : tuning.stream_bytes_adjacent);
  const bool stream = !in_place && out_bytes >= stream_from;
  const Kernels k = select_kernels(x0.scalar_type(), sin.scalar_type(), cos.scalar_type(), plan);
  if (x0.scalar_type() == at::kDouble) {
    run_blocks<double>(plan, tab, ops, k, stream, in_place, apart);
  } else {
    run_blocks<float>(plan, tab, ops, k, stream, in_place, apart);
  }
}

at::Tensor rope_matrix_cpu(const at::Tensor& x_in, const at::Tensor& y, const at::Tensor& sin,
                           const at::Tensor& cos) {
  const RopeOperands in = check_rope_matrix_inputs("rope_matrix", x_in, y, sin, cos);
  const at::Tensor x = rows_contiguous(x_in);
  note_call_outputs({x.nbytes()});
  at::Tensor out = new_output(x);
  run({{x, out}}, in.mat, in.sin, in.cos);
  return out;
}

std::tuple<at::Tensor, at::Tensor> rope_matrix_qk_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                      const at::Tensor& y, const at::Tensor& sin,
                                                      const at::Tensor& cos) {
  const RopeOperands in = check_rope_matrix_qk_inputs("rope_matrix_qk", q_in, k_in, y, sin, cos);
  const at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in);
  note_call_outputs({q.nbytes(), k.nbytes()});
  at::Tensor q_out = new_output(q);
  at::Tensor k_out = new_output(k);
  if (q.dim() == k.dim()) {
    run({{q, q_out}, {k, k_out}}, in.mat, in.sin, in.cos);  // one pass over the tables
  } else {
    run({{q, q_out}}, in.mat, in.sin, in.cos);
    run({{k, k_out}}, in.mat, in.sin, in.cos);
  }
  return {q_out, k_out};
}

void rope_matrix_inplace_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                             const at::Tensor& cos) {
  const RopeOperands in = check_rope_matrix_inputs("rope_matrix_", x, y, sin, cos);
  check_rope_matrix_inplace("rope_matrix_", x, y, sin, cos);
  check_output_cache_env();  // read by every call, as the other ops do
  if (x.size(-1) <= 1 || x.stride(-1) == 1) {
    run({{x, x}}, in.mat, in.sin, in.cos);  // each row is read whole before it is written
  } else {
    at::Tensor xc = x.contiguous();
    run({{xc, xc}}, in.mat, in.sin, in.cos);
    const_cast<at::Tensor&>(x).copy_(xc);
  }
}

// Which row kernel rope_matrix(x, y, sin, cos) takes on this CPU: "<isa>/<rows kind>" (Kernels),
// and for the pair rows "/" and one letter per group of 32 elements (PairKind: S same, O offset,
// P permute, Q two permutes, R masked loads of runs). A diagnostic for tests and benchmarks.
std::string cpu_kernel_choice(const at::Tensor& x, const at::Tensor& y, const at::Tensor& sin,
                              const at::Tensor& cos) {
  const RopeOperands in = check_rope_matrix_inputs("_cpu_kernel_choice", x, y, sin, cos);
  const std::shared_ptr<const RotatePlan> plan = cached_rotate_plan(in.mat);
  const Kernels k = select_kernels(x.scalar_type(), in.sin.scalar_type(), in.cos.scalar_type(), *plan);
  std::string choice = std::string(k.isa) + "/" + k.rows_kind;
  if (choice.size() >= 6 && choice.compare(choice.size() - 6, 6, "/pairs") == 0) {
    choice += "/";
    for (const PairGroupPlan& g : plan->pair_groups) choice += "SOPQR"[g.kind];
  }
  return choice;
}

// Which per-CPU tuning the kernel runs with (CpuTuning::name). A diagnostic for tests and benchmarks.
std::string cpu_tuning_name(const at::Tensor&) { return cpu_tuning().name; }

}  // namespace
}  // namespace cpu
}  // namespace npu_ops_transformer_ext

TORCH_LIBRARY_IMPL(npu_ops_transformer_ext, CPU, m) {
  m.impl("rope_matrix", &npu_ops_transformer_ext::cpu::rope_matrix_cpu);
  m.impl("rope_matrix_qk", &npu_ops_transformer_ext::cpu::rope_matrix_qk_cpu);
  m.impl("rope_matrix_", &npu_ops_transformer_ext::cpu::rope_matrix_inplace_cpu);
  m.impl("_cpu_kernel_choice", &npu_ops_transformer_ext::cpu::cpu_kernel_choice);
  m.impl("_cpu_tuning", &npu_ops_transformer_ext::cpu::cpu_tuning_name);
}
