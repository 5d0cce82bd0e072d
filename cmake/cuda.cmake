# The GPU backend (CUDA streams, NCCL collectives): MFSDP_WITH_CUDA=AUTO|ON|OFF.
#   AUTO (default) builds it when the CUDA toolkit and NCCL are both found, ON requires them,
#   OFF skips the search. The result is MFSDP_CUDA_ENABLED (ON/OFF) for the CMake files and
#   the interface target mfsdp_cuda (cudart, NCCL, MFSDP_WITH_CUDA=1) for code.
# A separate result variable, because if(MFSDP_WITH_CUDA) is true for the string AUTO.
set(MFSDP_WITH_CUDA AUTO CACHE STRING "Build the CUDA/NCCL backend: AUTO, ON or OFF")
set_property(CACHE MFSDP_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${MFSDP_WITH_CUDA}" _mfsdp_cuda_mode)
if(_mfsdp_cuda_mode MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(_mfsdp_cuda_mode ON)
elseif(_mfsdp_cuda_mode MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(_mfsdp_cuda_mode OFF)
elseif(NOT _mfsdp_cuda_mode STREQUAL "AUTO")
  message(FATAL_ERROR "MFSDP_WITH_CUDA=${MFSDP_WITH_CUDA} is not one of AUTO, ON, OFF")
endif()

set(MFSDP_CUDA_ENABLED OFF)
# What `mfsdp --version` says about the backend (cli/version.h).
set(MFSDP_CUDA_DESCRIPTION "off (configured with MFSDP_WITH_CUDA=OFF)")
if(_mfsdp_cuda_mode STREQUAL "OFF")
  message(STATUS "mfsdp: CUDA backend off (MFSDP_WITH_CUDA=OFF)")
  return()
endif()

# FindCUDAToolkit looks at CUDAToolkit_ROOT, CUDA_PATH, nvcc on PATH and /usr/local/cuda;
# point it at the versioned install this project targets when the user has not chosen one.
if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT}
   AND NOT DEFINED ENV{CUDA_PATH})
  foreach(_mfsdp_cuda_dir /usr/local/cuda-13.0 /usr/local/cuda)
    if(EXISTS "${_mfsdp_cuda_dir}/include/cuda_runtime_api.h")
      set(CUDAToolkit_ROOT "${_mfsdp_cuda_dir}")
      break()
    endif()
  endforeach()
endif()
find_package(CUDAToolkit QUIET)

set(_mfsdp_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME})
if(CUDAToolkit_FOUND)
  list(APPEND _mfsdp_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_INCLUDE_DIRS}/..
       ${CUDAToolkit_LIBRARY_DIR}/..)
endif()
find_path(MFSDP_NCCL_INCLUDE_DIR nccl.h HINTS ${_mfsdp_nccl_hints} PATH_SUFFIXES include)
find_library(MFSDP_NCCL_LIBRARY nccl HINTS ${_mfsdp_nccl_hints} PATH_SUFFIXES lib lib64)

set(_mfsdp_cuda_missing "")
if(NOT CUDAToolkit_FOUND)
  list(APPEND _mfsdp_cuda_missing
       "the CUDA toolkit (set CUDAToolkit_ROOT, e.g. -DCUDAToolkit_ROOT=/usr/local/cuda)")
endif()
if(NOT MFSDP_NCCL_INCLUDE_DIR OR NOT MFSDP_NCCL_LIBRARY)
  list(APPEND _mfsdp_cuda_missing "NCCL's nccl.h and libnccl (set -DNCCL_ROOT=DIR)")
endif()

if(_mfsdp_cuda_missing)
  list(JOIN _mfsdp_cuda_missing " and " _mfsdp_cuda_why)
  if(_mfsdp_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "MFSDP_WITH_CUDA=ON but this machine lacks ${_mfsdp_cuda_why}; "
                        "install them, point CMake at them, or configure with MFSDP_WITH_CUDA=OFF")
  endif()
  message(STATUS "mfsdp: CUDA backend off (MFSDP_WITH_CUDA=AUTO, not found: ${_mfsdp_cuda_why})")
  set(MFSDP_CUDA_DESCRIPTION "off (MFSDP_WITH_CUDA=AUTO found no CUDA toolkit and NCCL)")
  return()
endif()

# Read the NCCL version from its header, for the status line and docs/gpu.md's checks.
file(STRINGS "${MFSDP_NCCL_INCLUDE_DIR}/nccl.h" _mfsdp_nccl_version_lines
     REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
set(MFSDP_NCCL_VERSION "")
foreach(_mfsdp_line IN LISTS _mfsdp_nccl_version_lines)
  string(REGEX MATCH "[0-9]+$" _mfsdp_part "${_mfsdp_line}")
  string(APPEND MFSDP_NCCL_VERSION "${_mfsdp_part}.")
endforeach()
string(REGEX REPLACE "\\.$" "" MFSDP_NCCL_VERSION "${MFSDP_NCCL_VERSION}")

set(MFSDP_CUDA_ENABLED ON)
set(MFSDP_CUDA_DESCRIPTION "on (CUDA ${CUDAToolkit_VERSION}, NCCL ${MFSDP_NCCL_VERSION})")
add_library(mfsdp_cuda INTERFACE)
# An installed mfsdp finds NCCL again on the machine that uses it (cmake/mfsdpConfig.cmake.in
# makes mfsdp::nccl); the build's paths stay out of the exported targets.
target_include_directories(mfsdp_cuda SYSTEM INTERFACE
  $<BUILD_INTERFACE:${MFSDP_NCCL_INCLUDE_DIR}>)
target_link_libraries(mfsdp_cuda INTERFACE CUDA::cudart
  $<BUILD_INTERFACE:${MFSDP_NCCL_LIBRARY}> $<INSTALL_INTERFACE:mfsdp::nccl>)
target_compile_definitions(mfsdp_cuda INTERFACE MFSDP_WITH_CUDA=1)
message(STATUS "mfsdp: CUDA backend on (MFSDP_WITH_CUDA=${_mfsdp_cuda_mode}: CUDA "
               "${CUDAToolkit_VERSION} at ${CUDAToolkit_LIBRARY_DIR}, NCCL ${MFSDP_NCCL_VERSION} "
               "at ${MFSDP_NCCL_LIBRARY})")
