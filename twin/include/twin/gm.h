// The twin's runtime side of GM tensors: the rules `gm-unregistered`, `gm-out-of-bounds`, `gm-align`
// and `workspace-offset` on every GlobalTensor access (basic_api/kernel_tensor.h calls them).
#pragma once

#include <cstdint>

#include "twin/core.h"

namespace twin {

// SetGlobalBuffer: the pointer must lie in a GM allocation of the launch and, when sized, the
// declared `bytes` (`elems` elements) must fit in it. Returns the region id.
inline int register_global_buffer(const void* buffer, uint64_t bytes, uint64_t elems, bool sized) {
  auto& l = launch();
  const int region = l.find_region(buffer);
  // `workspace-offset`: the kernel receives the user workspace (the generated wrapper already skipped
  // the system part); a pointer in the 16 MiB past the workspace's end skipped it a second time (the
  // launch keeps those 16 MiB free of other allocations).
  const uint8_t* b = static_cast<const uint8_t*>(buffer);
  const uint8_t* ws_end = l.workspace() + l.workspace_bytes();
  if (region < 0 && l.workspace() && b >= ws_end && b < ws_end + kSysWorkspaceBytes) {
    fail("workspace-offset", str("SetGlobalBuffer at byte ", b - l.workspace(), " of a ", l.workspace_bytes(),
                                 "-byte workspace: the kernel's workspace argument is already the user workspace ",
                                 "(the generated wrapper passes GetUserWorkspace of it); adding the ", kSysWorkspaceBytes,
                                 "-byte system part again leaves the allocation"));
  }
  if (region < 0) fail("gm-unregistered", "SetGlobalBuffer with a pointer outside every GM allocation of the launch");
  const auto& r = l.region(region);
  const uint64_t lo = static_cast<const uint8_t*>(buffer) - r.base;
  if (sized && lo + bytes > r.bytes) {
    fail("gm-out-of-bounds", str("SetGlobalBuffer declares ", elems, " elements (", bytes, " bytes) at byte ", lo,
                                 " of GM allocation '", r.name, "' which has only ", r.bytes, " bytes"));
  }
  return region;
}

// An access of `span` bytes at `p`, which is `tensor_off` bytes past the start of a GlobalTensor of
// `tensor_bytes` bytes (`elems` elements of `elem` bytes, checked only when the tensor is `sized`).
inline void check_gm_span(int region, const uint8_t* p, bool sized, uint64_t tensor_off, uint64_t tensor_bytes,
                          uint64_t elems, uint64_t elem, const char* type, uint64_t span, bool write, const char* api) {
  auto& l = launch();
  if (region < 0) fail("gm-unregistered", str(api, ": GlobalTensor used before SetGlobalBuffer"));
  if (reinterpret_cast<uintptr_t>(p) % elem != 0) {
    fail("gm-align", str(api, ": GM address ", static_cast<const void*>(p), " is not aligned to its element size (",
                         elem, " bytes, ", type, ")"));
  }
  const auto& r = l.region(region);
  const int64_t lo = p - r.base;
  const int64_t hi = lo + static_cast<int64_t>(span);
  if (sized) {
    const int64_t elo = static_cast<int64_t>(tensor_off);
    const int64_t ehi = elo + static_cast<int64_t>(span);
    if (elo < 0 || ehi > static_cast<int64_t>(tensor_bytes)) {
      fail("gm-out-of-bounds", str(api, (write ? " writes" : " reads"), " elements [", elo / static_cast<int64_t>(elem),
                                   ", ", ehi / static_cast<int64_t>(elem), ") of GlobalTensor '", r.name,
                                   "' which has ", elems, " elements (", type, ")"));
    }
  }
  if (lo < 0 || hi > static_cast<int64_t>(r.bytes)) {
    fail("gm-out-of-bounds", str(api, (write ? " writes" : " reads"), " bytes [", lo, ", ", hi, ") of GM allocation '",
                                 r.name, "' which has ", r.bytes, " bytes"));
  }
}

}  // namespace twin
