#pragma once
// Human byte sizes: "1.5 MiB" out, "512MiB" / "2GB" / "1048576" in.

#include <cstdint>
#include <string>

namespace mfsdp::cli {

std::string format_bytes(int64_t bytes);
// Accepts an integer with an optional unit B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000). Throws Error(kUsage) naming `flag` otherwise.
int64_t parse_bytes(const std::string& text, const std::string& flag);

}  // namespace mfsdp::cli
