# Finds CUDA for gpu/ and enables the language. Included from the top-level
# CMakeLists.txt, because CUDA must be enabled in the highest directory whose
# targets link CUDA objects (the `ckptfs` command in tools/ does).
#
# CKPTFS_CUDA:
#   AUTO (default)  build the CUDA device sink, the device test and
#                   gpu_load_bench when a CUDA compiler is found: $CUDACXX,
#                   nvcc on PATH, or /usr/local/cuda/bin/nvcc. Sanitizer
#                   builds (CKPTFS_SANITIZE) leave CUDA out.
#   ON              the same, and a missing compiler is an error.
#   OFF             never; the loader is host-only and everything else builds
#                   exactly as without this file.
# Sets CKPTFS_HAVE_CUDA (ON/OFF) for gpu/CMakeLists.txt.
set(CKPTFS_CUDA AUTO CACHE STRING "CUDA device sink in gpu/: AUTO, ON or OFF")
set_property(CACHE CKPTFS_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${CKPTFS_CUDA}" _ckptfs_cuda_mode)

set(CKPTFS_HAVE_CUDA OFF)
if(NOT CKPTFS_CUDA)
  message(STATUS "ckptfs: CUDA off (CKPTFS_CUDA=${CKPTFS_CUDA}): host-only GPU loader")
elseif(_ckptfs_cuda_mode STREQUAL "AUTO" AND NOT CKPTFS_SANITIZE STREQUAL "")
  message(STATUS "ckptfs: CUDA left out of the ${CKPTFS_SANITIZE} sanitizer build "
                 "(-DCKPTFS_CUDA=ON forces it)")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler" FORCE)
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
    endif()
    # Everything links the shared libcudart, like CUDA::cudart, so that one
    # process never holds two copies of the runtime.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # .cu files are C++20 like the rest (CUDA_STANDARD follows CXX_STANDARD);
    # CMake before 3.26 does not know nvcc's flag for it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(CKPTFS_HAVE_CUDA ON)
    message(STATUS "ckptfs: CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_COMPILER}): "
                   "device sink, device test and gpu_load_bench enabled")
  elseif(_ckptfs_cuda_mode STREQUAL "AUTO")
    message(STATUS "ckptfs: no CUDA compiler found: host-only GPU loader")
  else()
    message(FATAL_ERROR "CKPTFS_CUDA=${CKPTFS_CUDA} but no CUDA compiler was found "
                        "(set CUDACXX or put nvcc on PATH)")
  endif()
endif()
unset(_ckptfs_cuda_mode)
