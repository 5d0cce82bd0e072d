// mfsdp compiles against the system Gloo headers, and a PyPI torch wheel's libtorch_cpu.so
// exports a bundled Gloo of another version under the same names. The dynamic linker binds
// each gloo:: symbol to the first library on the link line that defines it, so CMake must put
// the system libgloo before LibTorch (cmake/dependencies.cmake); these tests check that it did.

#include <dlfcn.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>

#include <string>

namespace mfsdp::executor {
namespace {

std::string real_path(const char* path) {
  char resolved[PATH_MAX];
  return realpath(path, resolved) ? std::string(resolved) : std::string(path);
}

// The file the dynamic linker took `address` from; a PIE takes a function's address through
// the GOT, so this is the definition the program's calls reach.
std::string library_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(no library)";
  return real_path(info.dli_fname);
}

TEST(GlooBinding, CollectivesResolveToTheLinkedGloo) {
  const std::string gloo = real_path(MFSDP_GLOO_LIBRARY);
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(&gloo::allgather)), gloo);
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(&gloo::allreduce)), gloo);
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(&gloo::broadcast)), gloo);
}

TEST(GlooBinding, TransportResolvesToTheLinkedGloo) {
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(&gloo::transport::tcp::CreateDevice)),
            real_path(MFSDP_GLOO_LIBRARY));
}

}  // namespace
}  // namespace mfsdp::executor
