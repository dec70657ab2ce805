// The twin's rules on how a kernel is launched and what it receives from the launch.
#pragma once

#include "twin/core.h"

namespace twin {

// `kernel-type`: the kernel's declared KernelMetaType (KERNEL_TASK_TYPE_DEFAULT) must match the type
// it was launched as (the enums share their order).
inline void declare_kernel_type(int declared) {
  tick();
  if (declared != static_cast<int>(launch().kind())) {
    fail("kernel-type", str("kernel declares KernelMetaType ", declared, " but was launched as ",
                            static_cast<int>(launch().kind())));
  }
}

// Vector cores per cube core of the running launch, as seen from the calling core.
inline int64_t task_ratio() {
  return launch().kind() == KernelKind::MIX_AIC_1_2 && core().type == CoreType::AIV ? 2 : 1;
}

// `workspace-size`: the launch's workspace must hold the system workspace; the user part follows it.
inline uint8_t* user_workspace() {
  auto& l = launch();
  if (l.workspace_bytes() < kSysWorkspaceBytes) {
    fail("workspace-size", str("workspace is ", l.workspace_bytes(), " bytes, less than the ", kSysWorkspaceBytes,
                               "-byte system workspace"));
  }
  return l.workspace() + kSysWorkspaceBytes;
}

}  // namespace twin
