// The twin's basic types and enums of Ascend C: the function qualifiers, GM_ADDR, the kernel types,
// pipe_t, TPosition, RoundMode, HardEvent (asc-devkit spreads these over kernel_type.h,
// impl/basic_api/common_types.h and kernel_event.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "twin/core.h"
#include "twin/launch_rules.h"

// ---- keywords and macros ------------------------------------------------------------------------
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
using GM_ADDR = uint8_t*;

enum KernelMetaType {
  KERNEL_TYPE_AIV_ONLY,
  KERNEL_TYPE_AIC_ONLY,
  KERNEL_TYPE_MIX_AIV_1_0,
  KERNEL_TYPE_MIX_AIC_1_0,
  KERNEL_TYPE_MIX_AIC_1_1,
  KERNEL_TYPE_MIX_AIC_1_2,
};


#define KERNEL_TASK_TYPE_DEFAULT(t) ::twin::declare_kernel_type(static_cast<int>(t))
// As in CANN's CPU debug mode: a runtime test of the simulated core's type.
#define ASCEND_IS_AIC (::twin::core().type == ::twin::CoreType::AIC)
#define ASCEND_IS_AIV (::twin::core().type == ::twin::CoreType::AIV)

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };

namespace AscendC {

enum class TPosition { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, TSCM };
using QuePosition = TPosition;

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID };

enum class HardEvent {
  MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1,
  MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2,
  MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX
};
static_assert(static_cast<int>(HardEvent::MAX) == 35, "twin/sync.h's event table follows this order");

template <typename T, typename U>
struct IsSameType {
  static constexpr bool value = std::is_same<T, U>::value;
};
}  // namespace AscendC
