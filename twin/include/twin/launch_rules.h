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

// GetSysWorkSpacePtr on A2: the address SetSysWorkspaceForce set (the generated wrapper sets it to the
// kernel's workspace argument before the kernel runs; `workspace-unset` when nothing did).
inline uint8_t* sys_workspace() {
  uint8_t* w = core().kfc_workspace;
  if (!w) fail("workspace-unset", "GetSysWorkSpacePtr/GetUserWorkspace before SetSysWorkspaceForce (the generated "
                                  "wrapper sets it; on the NPU the address would be undefined)");
  return w;
}

// GetUserWorkspace on A2 ignores its argument: the system workspace address + 16 MiB. `workspace-size`:
// the launch's workspace must hold the system part.
inline uint8_t* user_workspace() {
  uint8_t* w = sys_workspace();
  auto& l = launch();
  if (l.workspace_bytes() < kSysWorkspaceBytes) {
    fail("workspace-size", str("workspace is ", l.workspace_bytes(), " bytes, less than the ", kSysWorkspaceBytes,
                               "-byte system workspace"));
  }
  return w + kSysWorkspaceBytes;
}

}  // namespace twin
