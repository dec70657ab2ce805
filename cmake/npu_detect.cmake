# Decides between the CPU-only build and the NPU build, and says which in one line.
# The NPU build needs the CANN toolkit (ASCEND_HOME_PATH with the bisheng compiler) and torch_npu.
set(NPU_OPS_WITH_NPU OFF)
set(_npu_why "")
if(DEFINED ENV{ASCEND_HOME_PATH} AND EXISTS "$ENV{ASCEND_HOME_PATH}/compiler/ccec_compiler/bin/bisheng")
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch_npu, os; print(os.path.dirname(torch_npu.__file__))"
    OUTPUT_VARIABLE TORCH_NPU_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_npu_rc ERROR_QUIET)
  if(_torch_npu_rc EQUAL 0)
    set(NPU_OPS_WITH_NPU ON)
    set(ASCEND_HOME_PATH $ENV{ASCEND_HOME_PATH})
  else()
    set(_npu_why "torch_npu is not importable")
  endif()
else()
  set(_npu_why "CANN not found (ASCEND_HOME_PATH with compiler/ccec_compiler/bin/bisheng)")
endif()
if(NPU_OPS_WITH_NPU)
  message(STATUS "npu_ops_transformer_ext: NPU build (CANN at ${ASCEND_HOME_PATH}, torch_npu at ${TORCH_NPU_DIR})")
else()
  message(STATUS "npu_ops_transformer_ext: CPU-only build: ${_npu_why}")
endif()
