# NCCL for CUDA tensors in collectives (framework/distributed/detail/nccl_group.cpp). QAT_NCCL:
# AUTO (on when the CUDA backend and Gloo are on and nccl.h + libnccl are in the CUDA toolkit
# folder), ON (required), OFF. Sets QAT_HAS_NCCL; the one compile definition is QAT_HAS_NCCL on
# qat_framework (PRIVATE). Gloo is needed too: the NCCL unique id travels through the rendezvous
# store of the Gloo group, which keeps the CPU collectives (PyTorch's "cpu:gloo,cuda:nccl").
set(QAT_NCCL AUTO CACHE STRING "NCCL for CUDA tensors in collectives: AUTO, ON or OFF")
set_property(CACHE QAT_NCCL PROPERTY STRINGS AUTO ON OFF)
set(QAT_HAS_NCCL OFF)
if(QAT_NCCL STREQUAL "OFF")
  message(STATUS "qat: NCCL off (QAT_NCCL=OFF)")
else()
  set(qat_nccl_missing "")
  if(NOT QAT_HAS_CUDA)
    set(qat_nccl_missing "the CUDA backend is off")
  elseif(NOT TARGET gloo)
    set(qat_nccl_missing "distributed training (Gloo) is off")
  else()
    find_path(QAT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
    find_library(QAT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} NO_DEFAULT_PATH)
    if(NOT QAT_NCCL_INCLUDE_DIR OR NOT QAT_NCCL_LIBRARY)
      set(qat_nccl_missing
          "nccl.h or libnccl not found in ${CUDAToolkit_INCLUDE_DIRS} / ${CUDAToolkit_LIBRARY_DIR}")
    endif()
  endif()
  if(qat_nccl_missing STREQUAL "")
    set(QAT_HAS_NCCL ON)
    file(STRINGS ${QAT_NCCL_INCLUDE_DIR}/nccl.h qat_nccl_version
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]" "" qat_nccl_version "${qat_nccl_version}")
    string(REPLACE ";" "." qat_nccl_version "${qat_nccl_version}")
    message(STATUS "qat: NCCL on for CUDA tensors (NCCL ${qat_nccl_version}, ${QAT_NCCL_LIBRARY})")
  elseif(QAT_NCCL STREQUAL "ON")
    message(FATAL_ERROR "QAT_NCCL=ON but ${qat_nccl_missing}")
  else()
    message(STATUS "qat: NCCL off (${qat_nccl_missing}; QAT_NCCL=ON to require it)")
  endif()
endif()
