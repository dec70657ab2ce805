// Every header the ISA-specific row kernels use, included *before* the target pragma in
// rows_avx2.cpp / rows_avx512*.cpp. Only our own kernel code is compiled for the wider ISA; inline
// functions from these headers keep the baseline ISA, so the linker can never pick an AVX-512 copy
// of a shared inline function for code that runs on a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "cpu_kernel/fixed_perms.h"
#include "cpu_kernel/rows.h"
