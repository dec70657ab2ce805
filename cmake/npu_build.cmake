# The NPU build (included by the top-level CMakeLists.txt when cmake/npu_detect.cmake found CANN and
# torch_npu): compiles op_kernel/ with bisheng through CANN's ascendc_library (which also generates
# the aclrtlaunch_<kernel>.h launch wrappers) and adds the PrivateUse1 binding to _C.
#
#   SOC_VERSION   the SoC the kernel binary is built for (all 910B parts share arch dav-c220;
#                 the core counts are read at run time, never from this variable)
set(SOC_VERSION "Ascend910B3" CACHE STRING "SoC the Ascend C kernels are compiled for")
set(ASCEND_CANN_PACKAGE_PATH ${ASCEND_HOME_PATH})
set(RUN_MODE npu)

if(EXISTS ${NPU_OPS_ASCENDC_DEVKIT}/tikcpp/ascendc_kernel_cmake)
  set(ASCENDC_CMAKE_DIR ${NPU_OPS_ASCENDC_DEVKIT}/tikcpp/ascendc_kernel_cmake)
elseif(EXISTS ${ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake)
  set(ASCENDC_CMAKE_DIR ${ASCEND_HOME_PATH}/compiler/tikcpp/ascendc_kernel_cmake)
elseif(EXISTS ${ASCEND_HOME_PATH}/tools/tikcpp/ascendc_kernel_cmake)
  set(ASCENDC_CMAKE_DIR ${ASCEND_HOME_PATH}/tools/tikcpp/ascendc_kernel_cmake)
else()
  message(FATAL_ERROR "npu_ops_transformer_ext: ascendc_kernel_cmake not found under ${ASCEND_HOME_PATH}")
endif()
include(${ASCENDC_CMAKE_DIR}/ascendc.cmake)

# The kernel: the same source the CPU twin compiles. HAVE_WORKSPACE / HAVE_TILING: the last two
# kernel arguments are the workspace (registered as the system workspace, so GetUserWorkspace
# lands 16 MiB into it) and the tiling.
ascendc_library(rope_matrix_kernels STATIC ${CMAKE_CURRENT_SOURCE_DIR}/op_kernel/rope_matrix_kernel.cpp)
ascendc_compile_definitions(rope_matrix_kernels PRIVATE -DHAVE_WORKSPACE -DHAVE_TILING)
ascendc_include_directories(rope_matrix_kernels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})

execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import torch_npu, os; print(os.path.dirname(torch_npu.__file__))"
  OUTPUT_VARIABLE TORCH_NPU_PATH OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)

# The binding and the host tiling join _C; the host tiling uses CANN's MultiCoreMatmulTiling here
# (tiling/tiling_api.h from CANN, not the twin's).
target_sources(_C PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/torch_interface.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/op_host/rope_matrix_host.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/op_host/rope_matrix_tiling.cpp)
target_include_directories(_C PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}
  ${ASCEND_HOME_PATH}/include
  ${ASCEND_HOME_PATH}/include/tiling
  ${ASCEND_HOME_PATH}/compiler/tikcpp/tikcfw
  ${TORCH_NPU_PATH}/include
  ${CMAKE_CURRENT_BINARY_DIR}/include/rope_matrix_kernels)
target_link_directories(_C PRIVATE ${ASCEND_HOME_PATH}/lib64 ${TORCH_NPU_PATH}/lib)
target_link_libraries(_C PRIVATE rope_matrix_kernels ascendcl tiling_api platform register torch_npu)
message(STATUS "npu_ops_transformer_ext: Ascend C kernels for ${SOC_VERSION}, PrivateUse1 binding in _C")
