// The twin's synchronisation (asc-devkit kernel_operator_block_sync_intf.h): SetFlag / WaitFlag /
// PipeBarrier inside a core, CrossCoreSetFlag / CrossCoreWaitFlag between cores.
#pragma once

#include "basic_api/kernel_type.h"
#include "twin/sync.h"

namespace AscendC {

// A kernel's own SetFlag / WaitFlag: `event-id` also for ids 6 (reserved) and 7 (TPipe's
// automatic synchronisation), which the API's own code (the Matmul, twin/matmul_pipes.h) may use.
template <HardEvent event>
__aicore__ inline void SetFlag(int32_t eventID) {
  ::twin::check_user_event_id("SetFlag", eventID);
  ::twin::set_flag(static_cast<int>(event), eventID);
}
template <HardEvent event>
__aicore__ inline void WaitFlag(int32_t eventID) {
  ::twin::check_user_event_id("WaitFlag", eventID);
  ::twin::wait_flag(static_cast<int>(event), eventID);
}
template <pipe_t pipe>
__aicore__ inline void PipeBarrier() {
  ::twin::pipe_barrier(static_cast<int>(pipe));
}

template <uint8_t modeId, pipe_t pipe>
__aicore__ inline void CrossCoreSetFlag(uint16_t flagId) {
  ::twin::check_cross_set_pipe(static_cast<int>(pipe));
  ::twin::launch().cross_set(modeId, flagId, static_cast<int>(pipe));
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
__aicore__ inline void CrossCoreWaitFlag(uint16_t flagId) {
  ::twin::launch().cross_wait(flagId);
}

}  // namespace AscendC
