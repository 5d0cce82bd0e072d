#pragma once
// What `mfsdp --version` prints (docs/cli.md#version): this build's version and what it was
// built with. Only the two binaries link it, because its generated half changes with every
// commit.

#include <string>

namespace mfsdp::cli {

// The build's Debian-style version: "0.1.0" from a source tree without git (a release), else
// "0.1.0+git20261204.5608e40", the commit's date (UTC) and abbreviated hash. Generated at
// build time by cmake/version_script.cmake. Plans record the plain project version instead
// (plan.generator), so that a plan's bytes do not change with each commit.
const char* build_version();

// The lines `mfsdp --version` prints: "mfsdp VERSION", the LibTorch and Gloo it was built
// against, and whether the CUDA backend is in (with the CUDA and NCCL versions).
std::string version_text();

}  // namespace mfsdp::cli
