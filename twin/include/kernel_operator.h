// The twin's kernel_operator.h: the subset of the Ascend C API that op_kernel/ uses, executed on the
// CPU, one thread per simulated core, with hard errors wherever the hardware would misbehave or
// silently do something else. As in asc-devkit, this header only gathers one header per API area
// (basic_api/); the pipe/hazard model and the rules live in the twin's runtime (twin/). See
// docs/kernel.md ("The CPU twin") for the file map and the rules.
#pragma once

// ASCENDC_CUBE_ONLY changes what the Ascend C headers declare, so it must be defined before the first
// of them; lib/matmul_intf.h checks this record of whether it was.
#define TWIN_KERNEL_OPERATOR_INCLUDED 1
#ifdef ASCENDC_CUBE_ONLY
#define TWIN_CUBE_ONLY_BEFORE_KERNEL_OPERATOR 1
#endif

#include "basic_api/kernel_type.h"
#include "basic_api/kernel_operator_sys_var_intf.h"
#include "basic_api/kernel_operator_common_intf.h"
#include "basic_api/kernel_tensor.h"
#include "basic_api/kernel_tpipe.h"
#include "basic_api/kernel_operator_block_sync_intf.h"
#include "basic_api/kernel_struct_data_copy.h"
#include "basic_api/kernel_operator_data_copy_intf.h"
#include "basic_api/kernel_operator_vec_binary_intf.h"
#include "basic_api/kernel_operator_vec_binary_scalar_intf.h"
#include "basic_api/kernel_operator_vec_vconv_intf.h"
#include "basic_api/kernel_operator_vec_gather_intf.h"
#include "basic_api/kernel_operator_vec_duplicate_intf.h"

using AscendC::TPosition;
using AscendC::RoundMode;
