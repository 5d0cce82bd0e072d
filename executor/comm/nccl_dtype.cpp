#include "executor/comm/nccl_dtype.h"

#include <array>

#include "schema/error.h"

namespace mfsdp::executor {

ncclDataType_t nccl_dtype(const std::string& dtype) {
  struct Entry {
    const char* name;
    ncclDataType_t type;
  };
  static constexpr std::array<Entry, 8> kTypes{{
      {"float32", ncclFloat32},
      {"float64", ncclFloat64},
      {"float16", ncclFloat16},
      {"bfloat16", ncclBfloat16},
      {"int64", ncclInt64},
      {"int32", ncclInt32},
      {"int8", ncclInt8},
      {"uint8", ncclUint8},
  }};
  for (const Entry& entry : kTypes) {
    if (dtype == entry.name) return entry.type;
  }
  fail(ExitCode::kUsage, "dtype " + dtype +
                             " cannot be communicated with NCCL (it has float32, float64, "
                             "float16, bfloat16, int64, int32, int8 and uint8); re-plan with one "
                             "of those");
}

std::string encode_unique_id(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * NCCL_UNIQUE_ID_BYTES);
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

ncclUniqueId decode_unique_id(const std::string& hex) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail(ExitCode::kInternal, "malformed NCCL unique id in the rendezvous store: '" + hex + "'");
  };
  if (hex.size() != 2 * NCCL_UNIQUE_ID_BYTES) {
    fail(ExitCode::kInternal,
         "malformed NCCL unique id in the rendezvous store: " + std::to_string(hex.size()) +
             " hex digits, expected " + std::to_string(2 * NCCL_UNIQUE_ID_BYTES));
  }
  ncclUniqueId id{};
  for (size_t i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    id.internal[i] = static_cast<char>(digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]));
  }
  return id;
}

std::string publish_unique_ids(const std::vector<std::pair<std::string, std::string>>& ids) {
  std::string text;
  for (const auto& [name, hex] : ids) {
    if (name.empty() || name.find_first_of("=;") != std::string::npos) {
      fail(ExitCode::kInternal, "communicator name '" + name + "' is empty or contains '=' or ';'");
    }
    text += (text.empty() ? "" : ";") + name + "=" + hex;
  }
  return text;
}

std::string find_unique_id(const std::string& published, const std::string& name) {
  size_t start = 0;
  while (start < published.size()) {
    size_t end = published.find(';', start);
    if (end == std::string::npos) end = published.size();
    const size_t eq = published.find('=', start);
    if (eq < end && published.compare(start, eq - start, name) == 0 && eq - start == name.size()) {
      return published.substr(eq + 1, end - eq - 1);
    }
    start = end + 1;
  }
  return "";
}

}  // namespace mfsdp::executor
