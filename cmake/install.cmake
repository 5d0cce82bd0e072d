# `cmake --install build --prefix DIR` (docs/install.md): the two binaries, the libraries with
# their headers, and a relocatable CMake package, so that another project's
#   find_package(mfsdp CONFIG REQUIRED)
#   target_link_libraries(train PRIVATE mfsdp::executor)
# builds against them (examples/consumer/, built by scripts/check-install in CI).
include(CMakePackageConfigHelpers)

set(MFSDP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mfsdp)

# The exported names: mfsdp::schema, mfsdp::predict, mfsdp::planner, mfsdp::executor, ... The
# interface targets mfsdp_torch (LibTorch, with the system Gloo first) and mfsdp_cuda (cudart,
# NCCL) travel with them; the config file finds their dependencies again.
set(_mfsdp_exported mfsdp_schema mfsdp_predict mfsdp_safetensors mfsdp_torchscript mfsdp_planner
    mfsdp_search mfsdp_executor_comm mfsdp_executor mfsdp_launch mfsdp_torch)
if(MFSDP_CUDA_ENABLED)
  list(APPEND _mfsdp_exported mfsdp_executor_cuda mfsdp_cuda)
endif()
foreach(_mfsdp_target IN LISTS _mfsdp_exported)
  string(REGEX REPLACE "^mfsdp_" "" _mfsdp_name ${_mfsdp_target})
  set_target_properties(${_mfsdp_target} PROPERTIES EXPORT_NAME ${_mfsdp_name})
endforeach()

install(TARGETS mfsdp mfsdp-torch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${_mfsdp_exported} EXPORT mfsdpTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Every header of the libraries, in the source tree's layout: the public ones include
# internal ones, and a program includes them as "executor/runtime/context.h".
install(DIRECTORY schema predict safetensors planner search executor
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mfsdp FILES_MATCHING PATTERN "*.h")
install(FILES schema/plan.schema.json DESTINATION ${CMAKE_INSTALL_DATADIR}/mfsdp)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

install(EXPORT mfsdpTargets NAMESPACE mfsdp:: DESTINATION ${MFSDP_INSTALL_CMAKEDIR})
# Where this build found CUDA and NCCL: hints for the config file, which searches again.
set(MFSDP_BUILT_CUDA_ROOT "${CUDAToolkit_ROOT}")
get_filename_component(MFSDP_BUILT_NCCL_DIR "${MFSDP_NCCL_LIBRARY}" DIRECTORY)
configure_package_config_file(cmake/mfsdpConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mfsdpConfig.cmake INSTALL_DESTINATION ${MFSDP_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same minor version satisfies a request.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mfsdpConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mfsdpConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/mfsdpConfigVersion.cmake DESTINATION ${MFSDP_INSTALL_CMAKEDIR})
