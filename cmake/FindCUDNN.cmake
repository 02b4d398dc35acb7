# Finds cuDNN: cudnn.h and libcudnn in CUDNN_ROOT (variable or environment), the CUDA toolkit
# folder (CUDAToolkit_INCLUDE_DIRS / CUDAToolkit_LIBRARY_DIR, from find_package(CUDAToolkit))
# or the system. Sets CUDNN_FOUND, CUDNN_VERSION, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY and the
# imported target CUDNN::cudnn (shared). Installed with qat's package config, which calls
# find_dependency(CUDNN) in a build that uses it.
find_path(CUDNN_INCLUDE_DIR cudnn.h
          HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
             HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)

if(CUDNN_INCLUDE_DIR)
  # cuDNN 8+ keeps the version in cudnn_version.h, older releases in cudnn.h
  foreach(header cudnn_version.h cudnn.h)
    if(EXISTS "${CUDNN_INCLUDE_DIR}/${header}" AND NOT CUDNN_VERSION)
      file(STRINGS "${CUDNN_INCLUDE_DIR}/${header}" cudnn_defines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
      foreach(part MAJOR MINOR PATCHLEVEL)
        string(REGEX REPLACE ".*#define CUDNN_${part} ([0-9]+).*" "\\1" cudnn_${part} "${cudnn_defines}")
      endforeach()
      if(cudnn_MAJOR MATCHES "^[0-9]+$")
        set(CUDNN_VERSION "${cudnn_MAJOR}.${cudnn_MINOR}.${cudnn_PATCHLEVEL}")
      endif()
    endif()
  endforeach()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
                                  VERSION_VAR CUDNN_VERSION)
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn SHARED IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
