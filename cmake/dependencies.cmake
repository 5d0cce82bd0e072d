# Everything comes from Debian packages installed by scripts/install-deps; LibTorch may instead
# come from a PyPI torch wheel (CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path, see
# docs/libtorch2.md).
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(Gloo REQUIRED)
find_package(Torch REQUIRED)
# TorchConfig finds its libraries with find_library, which tries the system directories before
# the wheel's own lib/: with Debian's libtorch installed too, a wheel build would link 1.13.
get_filename_component(_mfsdp_torch_lib "${TORCH_LIBRARY}" REALPATH)
get_filename_component(_mfsdp_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
string(FIND "${_mfsdp_torch_lib}" "${_mfsdp_torch_prefix}/" _mfsdp_torch_at)
if(NOT _mfsdp_torch_at EQUAL 0)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX} found libtorch at "
                      "${TORCH_LIBRARY}, outside it; add ${TORCH_INSTALL_PREFIX} itself to "
                      "CMAKE_PREFIX_PATH (scripts/check-libtorch2 does) and configure a fresh "
                      "build directory")
endif()
message(STATUS "mfsdp: LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")

# TorchConfig puts its flags (ABI, warnings) into a variable rather than onto a target.
# The system libgloo comes first: a torch wheel's libtorch_cpu.so exports a bundled Gloo of
# another version, and the dynamic linker binds each gloo:: symbol to the first library on
# the link line that defines it. mfsdp compiles against the system Gloo headers, so its
# calls must reach the system library (tests/executor/comm/gloo_binding_test.cpp checks this).
# A CUDA build of LibTorch (the PyPI wheel) also brings libtorch_cuda, CUDA and NCCL through
# `torch`; without mfsdp's CUDA backend only its CPU half is linked, so that the programs do
# not load /usr/local/cuda's CUDA and NCCL, other versions than the wheel's own.
set(MFSDP_TORCH_LINK ${TORCH_LIBRARIES})
string(TOUPPER "${MFSDP_WITH_CUDA}" _mfsdp_torch_cuda_mode)
if(TARGET torch_cuda AND TARGET torch_cpu_library
   AND _mfsdp_torch_cuda_mode MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(MFSDP_TORCH_LINK torch_cpu_library)
endif()
add_library(mfsdp_torch INTERFACE)
# Installed, the LibTorch libraries are the ones the user's find_package(Torch) names, by the
# same rule (mfsdp::torch_libraries, cmake/mfsdpConfig.cmake.in), not this machine's paths.
target_link_libraries(mfsdp_torch INTERFACE gloo "$<BUILD_INTERFACE:${MFSDP_TORCH_LINK}>"
  "$<INSTALL_INTERFACE:mfsdp::torch_libraries>")
# CMake may still order LibTorch first when a program reaches both through several libraries
# (mfsdp-torch did); a link option comes before every library, whatever that order.
target_link_options(mfsdp_torch INTERFACE
  "LINKER:--push-state,--no-as-needed,$<TARGET_FILE:gloo>,--pop-state")
# `torch` also carries LibTorch's language level (cxx_std_20 in 2.15): keep it when
# linking the CPU half only.
get_target_property(_mfsdp_torch_features torch INTERFACE_COMPILE_FEATURES)
if(_mfsdp_torch_features)
  target_compile_features(mfsdp_torch INTERFACE ${_mfsdp_torch_features})
endif()
separate_arguments(MFSDP_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(mfsdp_torch INTERFACE ${MFSDP_TORCH_CXX_FLAGS})
# LibTorch's own targets carry these too; an installed mfsdp leaves them to those targets, so
# that no path of this machine's LibTorch (a wheel inside the source tree, say) is exported.
target_include_directories(mfsdp_torch SYSTEM INTERFACE
  "$<BUILD_INTERFACE:${TORCH_INCLUDE_DIRS}>")
