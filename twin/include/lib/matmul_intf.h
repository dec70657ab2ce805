// The twin's lib/matmul_intf.h, the header kernels include for the Matmul API: it checks that
// ASCENDC_CUBE_ONLY was defined before every Ascend C include (the only mode the twin models) and
// includes adv_api/matmul/matmul_intf.h, as CANN's does.
#pragma once

#ifndef ASCENDC_CUBE_ONLY
#error "twin: only the cube-only Matmul (define ASCENDC_CUBE_ONLY before every Ascend C include) is modelled"
#endif
#if defined(TWIN_KERNEL_OPERATOR_INCLUDED) && !defined(TWIN_CUBE_ONLY_BEFORE_KERNEL_OPERATOR)
#error "ASCENDC_CUBE_ONLY was defined after kernel_operator.h: define it before every Ascend C include"
#endif

#include "adv_api/matmul/matmul_intf.h"
