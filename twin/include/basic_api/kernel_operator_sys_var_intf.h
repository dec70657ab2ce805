// The twin's system variables: block and sub-block indices as the hardware numbers them (asc-devkit
// kernel_operator_sys_var_intf.h). Only spellings every supported CANN version has (8.0.RC2 .. 9.x):
// GetTaskRatio (9.x only) and GetTaskRation (older) are deliberately absent, so a kernel using either
// fails to compile here.
#pragma once

#include "basic_api/kernel_type.h"

namespace AscendC {

inline int64_t GetBlockIdx() {
  auto& c = ::twin::core();
  if (c.type == ::twin::CoreType::AIC) return c.block;
  return c.block * ::twin::task_ratio() + c.sub;
}
inline int64_t GetBlockNum() { return ::twin::launch().block_dim(); }
inline int64_t GetSubBlockIdx() { return ::twin::core().type == ::twin::CoreType::AIC ? 0 : ::twin::core().sub; }
inline int64_t GetSubBlockNum() { return ::twin::task_ratio(); }

}  // namespace AscendC
