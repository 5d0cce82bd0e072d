# The GPU backend (docs/gpu.md): CUDA streams and events, device slots, device selection and
# NCCL communicators. Plain C++ against the CUDA runtime and NCCL (no .cu files), built only
# when cmake/cuda.cmake enabled it. Its own library, so CPU-only builds are unchanged.
if(NOT MFSDP_CUDA_ENABLED)
  return()
endif()

add_library(mfsdp_executor_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comm/nccl_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_slots.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/cuda_tensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime/stream_layout.cpp)
target_include_directories(mfsdp_executor_cuda PUBLIC ${PROJECT_SOURCE_DIR})
# mfsdp_executor for the rendezvous, LaunchEnv and Timeline; mfsdp_cuda for cudart, NCCL
# and the MFSDP_WITH_CUDA=1 definition.
target_link_libraries(mfsdp_executor_cuda
  PUBLIC mfsdp_executor mfsdp_cuda Threads::Threads
  PRIVATE mfsdp_warnings)
