// The twin's runtime side of UB: the buffers a TPipe carves (with their TQue state and implied
// events), and the rules on UB operands. The API classes (basic_api/kernel_tensor.h,
// basic_api/kernel_tpipe.h) call into it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "basic_api/kernel_type.h"
#include "twin/core.h"
#include "twin/hazard.h"
namespace twin {

enum class BufState { FREE, OCCUPIED, ENQUE, DEQUE };
enum class Role { VecRead, VecWrite, MteIn, MteOut, Scalar };

struct BufInfo {
  uint32_t off = 0, len = 0;  // bytes in UB
  BufState state = BufState::FREE;
  uint32_t gen = 0;
  AscendC::TPosition pos = AscendC::TPosition::VECCALC;
  const void* owner = nullptr;  // the TQue / TBuf
  bool is_tbuf = false;
  const char* owner_name = "";
  // hazard model: vc of the producing pipe at EnQue, of the consuming pipe at FreeTensor
  VClock enq_snap{}, free_snap{};
};

// The pipes a TQue's implied hardware events connect: VECIN is filled by MTE2 and read by V,
// VECOUT filled by V and drained by MTE3; other positions imply no event (-1).
inline int que_producer(AscendC::TPosition pos) {
  return pos == AscendC::TPosition::VECIN ? kPipeMte2 : pos == AscendC::TPosition::VECOUT ? kPipeV : -1;
}
inline int que_consumer(AscendC::TPosition pos) {
  return pos == AscendC::TPosition::VECIN ? kPipeV : pos == AscendC::TPosition::VECOUT ? kPipeMte3 : -1;
}
// UB initcheck: true when all `n` shadow bytes at `d` are defined.
inline bool all_defined(const uint8_t* d, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (!d[k]) return false;
  return true;
}
// Starts an instruction on `pipe` of the calling core's hazard model.
inline void issue(int pipe, const char* api) { core().pipes.issue(pipe, api); }

class Pipe {
 public:
  std::vector<BufInfo> bufs;
  uint32_t used = 0;  // bytes carved from UB
  int que_bufs_per_pos[16] = {};
  uint32_t alloc(const char* what, AscendC::TPosition pos, uint32_t len, int num, bool queue, const void* owner) {
    tick();
    CoreCtx& c = core();
    if (c.type == CoreType::AIC) {
      fail("cube-core-ub", str(what, ": InitBuffer of a UB position on a cube core (the AIC has no UB)"));
    }
    if (num < 1 || num > 64) fail("pipe-init", str(what, ": buffer number ", num, " outside [1, 64]"));
    if (len == 0) fail("pipe-init", str(what, ": buffer length 0"));
    const uint32_t alen = (len + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
    if (bufs.size() + num > kMaxPipeBuffers) {
      fail("pipe-init", str(what, ": ", bufs.size() + num, " buffers in one TPipe, the limit is ", kMaxPipeBuffers));
    }
    if (queue) {
      int& n = que_bufs_per_pos[static_cast<int>(pos)];
      if (n + num > static_cast<int>(kMaxQueBuffersPerPosition)) {
        fail("pipe-init", str(what, ": ", n + num, " queue buffers on one TPosition, the A2 limit is ",
                              kMaxQueBuffersPerPosition));
      }
      n += num;
    }
    const uint64_t end = static_cast<uint64_t>(used) + static_cast<uint64_t>(alen) * num;
    if (end > kUbUsableBytes) {
      fail("ub-over-budget", str(what, ": InitBuffer(num=", num, ", len=", len, ") needs UB bytes up to ", end,
                                 "; usable UB is ", kUbUsableBytes, " (192 KiB minus 256 B framework and 8 KiB API "
                                 "reserve), already used ",
                                 used));
    }
    const uint32_t first = static_cast<uint32_t>(bufs.size());
    for (int i = 0; i < num; ++i) {
      BufInfo b;
      b.off = used;
      b.len = alen;
      b.pos = pos;
      b.owner = owner;
      b.is_tbuf = !queue;
      b.owner_name = what;
      b.state = queue ? BufState::FREE : BufState::OCCUPIED;
      bufs.push_back(b);
      used += alen;
    }
    c.stats->ub_peak = std::max<uint64_t>(c.stats->ub_peak, used);
    return first;
  }
};

inline Pipe& current_pipe(const char* api) {
  CoreCtx& c = core();
  if (!c.pipe) fail("no-tpipe", str(api, ": no TPipe alive on this core"));
  return *c.pipe;
}


// ---- the rules on UB operands (each in one place) ----------------------------------------------

// `cube-core-vector-op`: vector and GM <-> UB instructions run on vector cores only; the NPU silently
// skips them on a cube core.
inline void require_aiv(const char* api) {
  if (core().type != CoreType::AIV) {
    fail("cube-core-vector-op", str(api, " issued on a cube core: the NPU silently skips "
                                         "vector and GM<->UB instructions there"));
  }
}

// `ub-invalid-tensor`, `use-after-free`, `ub-align`, `ub-out-of-bounds`, `que-state`: an operand of
// `bytes` bytes at UB byte `off` of buffer `buf` (generation `gen`) used in `role`.
inline void check_operand(int buf, uint32_t gen, uint64_t off, uint64_t bytes, const char* type, uint64_t elems,
                          Role role, const char* api, bool need_align) {
  auto& pipe = current_pipe(api);
  if (buf < 0 || buf >= static_cast<int>(pipe.bufs.size())) {
    fail("ub-invalid-tensor", str(api, ": LocalTensor was not obtained from a TQue/TBuf of this core's TPipe"));
  }
  const BufInfo& b = pipe.bufs[buf];
  if (b.gen != gen || b.state == BufState::FREE) {
    fail("use-after-free", str(api, ": tensor of ", b.owner_name, " used after FreeTensor (the buffer ",
                               "may already hold another tile)"));
  }
  if (need_align && off % kBlockBytes != 0) fail("ub-align", str(api, ": UB address ", off, " is not 32-byte aligned"));
  if (bytes + off > static_cast<uint64_t>(b.off) + b.len) {
    fail("ub-out-of-bounds", str(api, ": ", elems, " elements of ", type, " at UB byte ", off, " pass the end of the ",
                                 b.len, "-byte buffer of ", b.owner_name, " at ", b.off));
  }
  if (b.is_tbuf || role == Role::Scalar) return;
  const bool in = b.pos == AscendC::TPosition::VECIN;
  BufState need;
  if (in) need = role == Role::MteIn ? BufState::OCCUPIED : BufState::DEQUE;
  else need = role == Role::MteOut ? BufState::DEQUE : BufState::OCCUPIED;
  if (b.state != need) {
    const char* why = in ? (role == Role::MteIn ? "GM->UB copy into a VECIN buffer that is not freshly allocated"
                                                : "vector use of a VECIN tensor before DeQue: the MTE2->V wait is missing")
                         : (role == Role::MteOut ? "UB->GM copy of a VECOUT tensor before DeQue: the V->MTE3 wait is missing"
                                                 : "vector use of a VECOUT tensor after EnQue/DeQue");
    fail("que-state", str(api, ": ", why, " (", b.owner_name, ")"));
  }
}

// `datacopy-position`: GM -> UB copies land only in VECIN / VECOUT buffers on A2 (the MTE2 path of a
// TBuf<VECCALC> or another position is not a valid copy target).
inline void check_mte2_target(int buf, const char* api) {
  auto& pipe = current_pipe(api);
  if (buf < 0 || buf >= static_cast<int>(pipe.bufs.size())) return;  // check_operand reports it
  const BufInfo& b = pipe.bufs[buf];
  if (b.pos != AscendC::TPosition::VECIN && b.pos != AscendC::TPosition::VECOUT) {
    fail("datacopy-position", str(api, ": GM -> UB into a ", b.is_tbuf ? "TBuf" : "TQue", " of position ",
                                  static_cast<int>(b.pos), " (A2 copies GM -> UB only into VECIN or VECOUT buffers)"));
  }
}

// `uninitialized-read` (UB): bytes about to leave the core (to GM or the scalar unit) must hold values
// written in this launch, or computed only from such values.
inline void require_defined(const char* api, uint64_t off, uint64_t bytes) {
  const uint8_t* d = core().ub_def.data() + off;
  for (uint64_t k = 0; k < bytes; ++k) {
    if (!d[k]) {
      fail("uninitialized-read", str(api, " takes UB bytes [", off, ", ", off + bytes, ") of which byte ", off + k,
                                     " holds no value written in this launch ",
                                     "(nor one computed only from written values): the NPU would use stale UB content"));
    }
  }
}

// `vector-overlap`: a vector instruction's dst may coincide with a source of the same width, not
// overlap it partially.
inline void check_overlap(const char* api, uint64_t d0, uint64_t dbytes, uint64_t s0, uint64_t sbytes, bool same_width) {
  const uint64_t d1 = d0 + dbytes, s1 = s0 + sbytes;
  const bool overlap = d0 < s1 && s0 < d1;
  const bool identical = d0 == s0 && same_width;
  if (overlap && !identical) {
    fail("vector-overlap", str(api, ": dst UB [", d0, ", ", d1, ") partially overlaps src [", s0, ", ", s1, ")"));
  }
}

// `vector-shift`: ShiftLeft/ShiftRight take an amount in [0, 16] for 16-bit and [0, 32] for 32-bit
// elements on A2 (asc-devkit ShiftLeft.md / ShiftRight.md, 约束说明).
inline void check_shift_amount(const char* api, int64_t amount, int bits) {
  if (amount < 0 || amount > bits) {
    fail("vector-shift", str(api, ": shift amount ", amount, " is outside [0, ", bits, "] for ", bits, "-bit elements"));
  }
}

// `gather-offset`: each Gather offset (bytes, plus the base) must be a multiple of the element size
// inside the source buffer; the NPU would read any UB.
inline void check_gather_offset(uint32_t i, uint32_t off, uint32_t base, uint64_t elem, uint64_t src_bytes) {
  const uint64_t o = static_cast<uint64_t>(off) + base;
  if (o % elem != 0 || o + elem > src_bytes) {
    fail("gather-offset", str("Gather offset[", i, "] = ", off, " (+ base ", base, ") is not a multiple of ", elem,
                              " inside the ", src_bytes, "-byte source"));
  }
}

}  // namespace twin
