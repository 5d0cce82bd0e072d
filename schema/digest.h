#pragma once

#include <string>

namespace mfsdp::schema {

// Lower-case hex SHA-256 of bytes / of a file's content (Error(kUsage) if unreadable).
std::string sha256_hex(const std::string& bytes);
std::string sha256_file_hex(const std::string& path);

}  // namespace mfsdp::schema
