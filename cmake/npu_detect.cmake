# Decides between the CPU-only build and the NPU build, and says which in one line.
# The NPU build needs the CANN toolkit (the bisheng compiler) and torch_npu.
#
# CANN root: -DASCEND_CANN_PACKAGE_PATH=..., else the environment's ASCEND_HOME_PATH (set by CANN's
# set_env.sh). Inside it the compiler sits in one of the layouts CANN's own host cmake accepts, tried
# in the same order:
#   <arch>-linux/ccec_compiler   (x86_64-linux or aarch64-linux, matching this machine)
#   tools/ccec_compiler
#   compiler/ccec_compiler
#   ascendc_devkit/ccec_compiler
# The directory holding ccec_compiler is NPU_OPS_ASCENDC_DEVKIT (cmake/npu_build.cmake looks for
# tikcpp/ascendc_kernel_cmake there first).
set(NPU_OPS_WITH_NPU OFF)
set(_npu_why "")
set(_npu_root "")
if(ASCEND_CANN_PACKAGE_PATH)
  set(_npu_root "${ASCEND_CANN_PACKAGE_PATH}")
elseif(DEFINED ENV{ASCEND_HOME_PATH})
  set(_npu_root "$ENV{ASCEND_HOME_PATH}")
endif()

set(NPU_OPS_ASCENDC_DEVKIT "")
if(_npu_root)
  string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" _npu_proc)
  set(_npu_layouts tools compiler ascendc_devkit)
  if(_npu_proc STREQUAL "x86_64" OR _npu_proc STREQUAL "aarch64")
    list(PREPEND _npu_layouts "${_npu_proc}-linux")
  endif()
  foreach(_layout IN LISTS _npu_layouts)
    if(EXISTS "${_npu_root}/${_layout}/ccec_compiler/bin/bisheng")
      set(NPU_OPS_ASCENDC_DEVKIT "${_npu_root}/${_layout}")
      set(NPU_OPS_CANN_LAYOUT "${_layout}/ccec_compiler")
      break()
    endif()
  endforeach()
  if(NOT NPU_OPS_ASCENDC_DEVKIT)
    list(TRANSFORM _npu_layouts APPEND "/ccec_compiler/bin/bisheng")
    string(REPLACE ";" ", " _npu_tried "${_npu_layouts}")
    set(_npu_why "CANN at ${_npu_root} has no bisheng (tried ${_npu_tried})")
  endif()
else()
  set(_npu_why "CANN not found (set ASCEND_HOME_PATH, e.g. by sourcing CANN's set_env.sh)")
endif()

if(NPU_OPS_ASCENDC_DEVKIT)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch_npu, os; print(os.path.dirname(torch_npu.__file__))"
    OUTPUT_VARIABLE TORCH_NPU_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_npu_rc ERROR_QUIET)
  if(_torch_npu_rc EQUAL 0)
    set(NPU_OPS_WITH_NPU ON)
    set(ASCEND_HOME_PATH "${_npu_root}")
  else()
    set(_npu_why "torch_npu is not importable (CANN found at ${_npu_root}, ${NPU_OPS_CANN_LAYOUT})")
  endif()
endif()
if(NPU_OPS_WITH_NPU)
  message(STATUS "npu_ops_transformer_ext: NPU build (CANN at ${ASCEND_HOME_PATH}, compiler layout "
                 "${NPU_OPS_CANN_LAYOUT}, torch_npu at ${TORCH_NPU_DIR})")
else()
  message(STATUS "npu_ops_transformer_ext: CPU-only build: ${_npu_why}")
endif()
