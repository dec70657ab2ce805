// The Matmul's work on the cube core's pipes, as the hardware does it, on the pipe model of
// twin/hazard.h (rule `pipe-race` on L1, L0A, L0B, L0C). Per step of one IterateAll (an M block,
// an N block, a K block; ORDER_M walks K inside M inside N):
//   MTE2  GM -> L1        A block into its L1 slot, B block into its slot (or the L1 cache of B,
//                         only when twin/matmul_l1.h says it is read from GM in this step)
//   MTE1  L1 -> L0A/L0B   the two blocks into their L0 ping-pong slots
//   M     Mmad            L0A x L0B accumulated into the C block's L0C slot
//   FIX   L0C -> GM       after the last K block of a C block
// with the synchronisation the Matmul implementation has between them (asc-devkit
// impl/adv_api/detail/matmul): the L1 blocks sit in TQue<A1/B1> queues (resource/cube_in_buffer),
// whose EnQue/DeQue imply MTE2 -> MTE1 and FreeTensor/AllocTensor MTE1 -> MTE2; the L0A/L0B
// ping-pong sets and waits MTE1_M and M_MTE1 itself (resource/l0_buffer/tbuf_pool_l0_base.h); L0C is a
// TQue<CO1> (resource/cube_out_buffer/cube_out_buffer_no_unit_flag.h): M -> FIX on EnQue/DeQue,
// FIX -> M on FreeTensor/AllocTensor. The twin spells them all as
// SetFlag/WaitFlag<MTE2_MTE1>, <MTE1_MTE2>, <MTE1_M>, <M_MTE1>, <M_FIX>, <FIX_M> with event ids
// 4 + slot. A set whose wait has not come yet is waited for before its buffer is used again, the
// rest at the end of the IterateAll. The L1/L0 layout is the twin's own (ping-pong slots of one
// base block each, the cache of B after them); the tiling's capacity rules are checked elsewhere
// (twin/matmul_rules.h). A test-only hook (CoreCtx::test_drop_wait) drops one kind of wait, as a
// broken Matmul implementation would.
#pragma once

#include <cstdint>

#include "twin/core.h"
#include "twin/hazard.h"
#include "twin/sync.h"

namespace twin {

class MatmulPipes {
 public:
  // HardEvent values (basic_api/kernel_type.h order).
  static constexpr int kMte2Mte1 = 0, kMte1Mte2 = 1, kMte1M = 2, kMMte1 = 3, kMFix = 17, kFixM = 18;
  static constexpr int kFirstId = 4;

  void begin(int64_t baseM, int64_t baseN, int64_t baseK, int64_t elem, int dbL0C) {
    aSlot_ = baseM * baseK * elem;
    bSlot_ = baseK * baseN * elem;
    cSlot_ = baseM * baseN * 4;
    elem_ = elem;
    dbC_ = dbL0C > 0 ? dbL0C : 1;
    step_ = 0;
    cTile_ = 0;
  }

  // One step: an mRows x kLen block of A times a kLen x nCols block of B (K block `kb`). `loadB`:
  // B's block comes from GM in this step; `cachedB`: it lives in the L1 cache of B.
  void step(int64_t mRows, int64_t nCols, int64_t kLen, int64_t kb, bool firstK, bool lastK, bool loadB, bool cachedB) {
    auto& m = core().pipes;
    const int s = static_cast<int>(step_ % 2), id = kFirstId + s;
    const uint64_t aBytes = mRows * kLen * elem_, bBytes = kLen * nCols * elem_, cBytes = mRows * nCols * 4;
    const uint64_t aL1 = s * aSlot_, bL1 = cachedB ? 2 * aSlot_ + 2 * bSlot_ + kb * bSlot_ : 2 * aSlot_ + s * bSlot_;
    const uint64_t l0 = s * (32u << 10);
    const int cs = static_cast<int>(cTile_ % dbC_);
    const uint64_t l0c = cs * cSlot_;
    wait_pending(kMte1Mte2, id);  // the L1 slots' previous readers
    m.issue(kPipeMte2, "Matmul: A block GM -> L1 (MTE2)");
    m.access_cube(kL1, kPipeMte2, aL1, aBytes, true);
    if (loadB) {
      m.issue(kPipeMte2, "Matmul: B block GM -> L1 (MTE2)");
      m.access_cube(kL1, kPipeMte2, bL1, bBytes, true);
    }
    set(kMte2Mte1, id);
    wait(kMte2Mte1, id);
    wait_pending(kMMte1, id);  // the L0 slots' previous reader
    m.issue(kPipeMte1, "Matmul: A block L1 -> L0A (MTE1)");
    m.access_cube(kL1, kPipeMte1, aL1, aBytes, false);
    m.access_cube(kL0A, kPipeMte1, l0, aBytes, true);
    m.issue(kPipeMte1, "Matmul: B block L1 -> L0B (MTE1)");
    m.access_cube(kL1, kPipeMte1, bL1, bBytes, false);
    m.access_cube(kL0B, kPipeMte1, l0, bBytes, true);
    set(kMte1Mte2, id);
    set(kMte1M, id);
    wait(kMte1M, id);
    if (firstK) wait_pending(kFixM, kFirstId + cs);  // the L0C slot's previous FixPipe
    m.issue(kPipeM, "Matmul: Mmad L0A x L0B -> L0C (M)");
    m.access_cube(kL0A, kPipeM, l0, aBytes, false);
    m.access_cube(kL0B, kPipeM, l0, bBytes, false);
    if (!firstK) m.access_cube(kL0C, kPipeM, l0c, cBytes, false);
    m.access_cube(kL0C, kPipeM, l0c, cBytes, true);
    set(kMMte1, id);
    if (lastK) {
      set(kMFix, kFirstId + cs);
      wait(kMFix, kFirstId + cs);
      m.issue(kPipeFix, "Matmul: FixPipe L0C -> GM (FIX)");
      m.access_cube(kL0C, kPipeFix, l0c, cBytes, false);
      set(kFixM, kFirstId + cs);
      ++cTile_;
    }
    ++step_;
  }

  // End of the IterateAll: every set still pending is waited for.
  void end() {
    for (int e : {kMte1Mte2, kMMte1, kFixM})
      for (int id = kFirstId; id < kFirstId + 2; ++id) wait_pending(e, id);
  }

 private:
  void set(int e, int id) {
    set_flag(e, id);
    pending_[e][id] = true;
  }
  void wait(int e, int id) {
    pending_[e][id] = false;
    if (core().test_drop_wait == e) return;  // test-only: the broken implementation forgets it
    wait_flag(e, id);
  }
  void wait_pending(int e, int id) {
    if (pending_[e][id]) wait(e, id);
  }

  int64_t aSlot_ = 0, bSlot_ = 0, cSlot_ = 0, elem_ = 2, step_ = 0, cTile_ = 0;
  int dbC_ = 1;
  bool pending_[64][8] = {};
};

// Test-only: the Matmul of the calling core forgets every WaitFlag of HardEvent `event`.
inline void test_only_drop_matmul_wait(int event) { core().test_drop_wait = event; }

}  // namespace twin
