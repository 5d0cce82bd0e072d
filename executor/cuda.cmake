# The GPU backend (docs/gpu.md): CUDA streams and events, device slots, device selection,
# NCCL communicators and mfsdp probe's NCCL lanes. Plain C++ against the CUDA runtime and
# NCCL (no .cu files), built only when cmake/cuda.cmake enabled it. Its own library, so
# CPU-only builds are unchanged.
if(NOT MFSDP_CUDA_ENABLED)
  return()
endif()

add_library(mfsdp_executor_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_bootstrap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_watchdog.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_event_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_slots.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_tensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/torch_cuda_stream.cpp)
target_include_directories(mfsdp_executor_cuda PUBLIC ${MFSDP_PUBLIC_INCLUDES})
# mfsdp_executor_comm for the rendezvous, LaunchEnv, Timeline and the stream layout;
# mfsdp_cuda for cudart, NCCL and the MFSDP_WITH_CUDA=1 definition; LibTorch for the tensor
# helpers (cuda_tensor.h, torch_cuda_stream.h). The runtime built from these pieces,
# cuda_runtime.cpp, is part of mfsdp_executor, which links this library (never the reverse).
target_link_libraries(mfsdp_executor_cuda
  PUBLIC mfsdp_executor_comm mfsdp_cuda mfsdp_torch Threads::Threads
  PRIVATE $<BUILD_INTERFACE:mfsdp_warnings>)

# Ordering LibTorch's kernels against the collective streams needs c10_cuda, the CUDA half of
# a CUDA LibTorch (a torch wheel's). Debian's CPU-only LibTorch ships c10/cuda headers but no
# library: there the GPU runtime refuses to start, and the c10_cuda code is still compiled
# (not linked) so that every CI build checks it, with the one generated header Debian lacks.
if(TARGET c10_cuda)
  target_link_libraries(mfsdp_executor_cuda PRIVATE c10_cuda)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/runtime/torch_cuda_stream.cpp
    PROPERTIES COMPILE_DEFINITIONS MFSDP_TORCH_CUDA=1)
  message(STATUS "mfsdp: GPU runtime uses LibTorch's c10_cuda")
else()
  message(STATUS "mfsdp: LibTorch has no c10_cuda (CPU-only): the GPU runtime is built but "
                 "refuses to train; see docs/gpu.md")
  set(MFSDP_CUDA_DESCRIPTION "${MFSDP_CUDA_DESCRIPTION}, but this LibTorch is CPU-only, so runs use the CPU (docs/gpu.md)" PARENT_SCOPE)
  find_path(_mfsdp_c10_cuda_headers c10/cuda/CUDAStream.h HINTS ${TORCH_INCLUDE_DIRS})
  if(_mfsdp_c10_cuda_headers)
    set(_mfsdp_shim ${CMAKE_CURRENT_BINARY_DIR}/c10_cuda_shim)
    # CONFIGURE leaves an unchanged file alone, so re-configuring rebuilds nothing.
    file(CONFIGURE OUTPUT ${_mfsdp_shim}/c10/cuda/impl/cuda_cmake_macros.h
         CONTENT "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    add_library(mfsdp_torch_cuda_compile_check OBJECT
      ${CMAKE_CURRENT_LIST_DIR}/runtime/torch_cuda_stream.cpp)
    target_include_directories(mfsdp_torch_cuda_compile_check PRIVATE ${PROJECT_SOURCE_DIR})
    target_include_directories(mfsdp_torch_cuda_compile_check SYSTEM AFTER PRIVATE ${_mfsdp_shim})
    target_compile_definitions(mfsdp_torch_cuda_compile_check PRIVATE MFSDP_TORCH_CUDA=1)
    target_link_libraries(mfsdp_torch_cuda_compile_check PRIVATE mfsdp_torch mfsdp_cuda
      mfsdp_warnings)
  endif()
endif()
