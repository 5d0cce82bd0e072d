#include "cli/version.h"

// cli/CMakeLists.txt defines these from what the configure step found.
#ifndef MFSDP_TORCH_VERSION
#error "MFSDP_TORCH_VERSION must be defined by the build"
#endif

namespace mfsdp::cli {

std::string version_text() {
  return std::string("mfsdp ") + build_version() +
         "\nbuilt with LibTorch " MFSDP_TORCH_VERSION ", Gloo " MFSDP_GLOO_VERSION
         "\nCUDA backend: " MFSDP_CUDA_BACKEND;
}

}  // namespace mfsdp::cli
