# cuDNN for conv2d on CUDA tensors. QAT_CUDNN: AUTO (on when the CUDA backend is on and cudnn.h
# + libcudnn are found in the CUDA toolkit folder, CUDNN_ROOT or the system), ON (required),
# OFF. Sets QAT_HAS_CUDNN; the compile definition QAT_HAS_CUDNN is private to qat_framework.
# Without it conv2d on CUDA runs im2col + cuBLAS (also chosen at run time with QAT_CUDNN=0).
set(QAT_CUDNN AUTO CACHE STRING "cuDNN for conv2d on CUDA: AUTO, ON or OFF")
set_property(CACHE QAT_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(QAT_HAS_CUDNN OFF)
if(QAT_CUDNN STREQUAL "OFF")
  message(STATUS "qat: cuDNN off (QAT_CUDNN=OFF)")
elseif(NOT QAT_HAS_CUDA)
  if(QAT_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "QAT_CUDNN=ON needs the CUDA backend, which is off (QAT_CUDA)")
  endif()
  message(STATUS "qat: cuDNN off (no CUDA backend)")
else()
  list(APPEND CMAKE_MODULE_PATH "${PROJECT_SOURCE_DIR}/cmake")
  find_package(CUDNN QUIET)
  if(CUDNN_FOUND)
    set(QAT_HAS_CUDNN ON)
    message(STATUS "qat: cuDNN on (${CUDNN_VERSION}, ${CUDNN_LIBRARY}): conv2d on CUDA through cuDNN")
  elseif(QAT_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "QAT_CUDNN=ON but cudnn.h / libcudnn were not found in the CUDA toolkit "
                        "(${CUDAToolkit_LIBRARY_DIR}) or the system (set CUDNN_ROOT)")
  else()
    message(STATUS "qat: cuDNN off (cudnn.h / libcudnn not found; CUDNN_ROOT or QAT_CUDNN=ON): "
                   "conv2d on CUDA through im2col + cuBLAS")
  endif()
endif()
