// The code CANN's ascendc_library generates around a kernel, which the twin runs on every core before
// the kernel body, as the NPU does. Read from asc-devkit cmake/asc/legacy_modules/util/
// extract_host_stub.py (_generate_sub_source, _generate_workspace_param_source,
// _generate_matmul_clear_source) with HAVE_WORKSPACE and HAVE_TILING defined (cmake/npu_build.cmake),
// the A2 implementations in impl/basic_api/dav_c220/kernel_operator_common_impl.h
// (SetSysWorkspaceForce, GetUserWorkspace) and impl/adv_api/detail/kfc/kernel_kfc.h (clearWorkspace):
//
//   workspace_param = <the next-to-last kernel argument>;      // the tiling is the last
//   if (workspace_param == nullptr) return;                    // MIX kernels only
//   SetSysWorkspaceForce(workspace_param);                     // the KFC workspace address
//   workspace_usr = GetUserWorkspace(workspace_param);         // that address + 16 MiB
//   if (AIC of a MIX kernel that defines REGIST_MATMUL_OBJ)    // i.e. includes lib/matmul_intf.h
//     matmul::clearWorkspace(workspace_param);                 // clears the KFC message area, then
//                                                              // NotifyEvent<PIPE_MTE3>(15): mode 2
//   <the kernel>(..., workspace_usr, tiling);
//
// The notify raises flag 15 (WORKSPACE_SYNC_ID) on both vector cores of the block; in a non-cube-only
// MIX kernel the vector side's REGIST_MATMUL_OBJ waits for it, in a cube-only one (ours) nothing does,
// so each vector core ends the kernel with flag 15 at 1: the end-of-kernel check expects exactly that
// (Launch::library_notify) and still reports every other unbalanced flag. The clear's writes to the
// system workspace are not counted as GM traffic.
#pragma once

#include <cstdint>

#include "twin/core.h"
#include "twin/launch_rules.h"

namespace twin {

template <class Kernel>
inline void run_generated_wrapper(bool mix, uint8_t* workspace_param, Kernel&& kernel) {
  if (mix && workspace_param == nullptr) return;
  core().kfc_workspace = workspace_param;
  uint8_t* workspace_usr = user_workspace();
  if (mix && core().type == CoreType::AIC) launch().library_notify(static_cast<int>(kFlagKfc));
  kernel(workspace_usr);
}

}  // namespace twin
