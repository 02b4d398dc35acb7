# The CUDA backend. QAT_CUDA: AUTO (on when a CUDA compiler is found, /usr/local/cuda/bin/nvcc
# included), ON (required), OFF. Sets QAT_HAS_CUDA; the one compile definition is QAT_HAS_CUDA
# on qat_framework / qat_modules (PRIVATE: public headers never depend on it).
set(QAT_CUDA AUTO CACHE STRING "CUDA backend: AUTO, ON or OFF")
set_property(CACHE QAT_CUDA PROPERTY STRINGS AUTO ON OFF)
set(QAT_HAS_CUDA OFF)
if(NOT QAT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_80 and sm_90 machine code, PTX of sm_90 for newer GPUs (few targets: CI builds on 2 cores)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
    endif()
    enable_language(CUDA)
    # CUDA sources follow CXX_STANDARD (20), whose nvcc flag CMake 3.25 does not know yet.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    endif()
    # -fmad=false for every kernel: no a * b + c contraction, the float32 bits of the CPU path
    # (fake quantization is bit-exact with it).
    string(APPEND CMAKE_CUDA_FLAGS " -fmad=false")
    find_package(CUDAToolkit REQUIRED)
    set(QAT_HAS_CUDA ON)
    message(STATUS "qat: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                   "architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(QAT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QAT_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or CUDACXX)")
  else()
    message(STATUS "qat: CUDA backend off (no CUDA compiler found; QAT_CUDA=ON to require it)")
  endif()
endif()
