# Everything comes from Debian packages installed by scripts/install-deps.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(Torch REQUIRED)

# TorchConfig puts its flags (ABI, warnings) into a variable rather than onto a target.
add_library(mfsdp_torch INTERFACE)
target_link_libraries(mfsdp_torch INTERFACE ${TORCH_LIBRARIES})
separate_arguments(MFSDP_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(mfsdp_torch INTERFACE ${MFSDP_TORCH_CXX_FLAGS})
target_include_directories(mfsdp_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
