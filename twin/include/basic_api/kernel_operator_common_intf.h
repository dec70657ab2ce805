// The twin's workspace accessors (asc-devkit kernel_operator_common_intf.h; the A2 implementation is
// impl/basic_api/dav_c220/kernel_operator_common_impl.h): the argument is ignored, the user part
// starts 16 MiB after the system workspace the generated wrapper registered (twin/launch_rules.h,
// twin/kernel_wrapper.h).
#pragma once

#include "basic_api/kernel_type.h"

namespace AscendC {

inline GM_ADDR GetUserWorkspace(GM_ADDR /*workspace*/) { return ::twin::user_workspace(); }

}  // namespace AscendC

// CANN declares this one at global scope, outside namespace AscendC; so does the twin.
inline GM_ADDR GetSysWorkSpacePtr() { return ::twin::sys_workspace(); }
