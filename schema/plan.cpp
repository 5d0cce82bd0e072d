#include "schema/plan.h"

#include <array>

#include "schema/error.h"

namespace mfsdp::schema {
namespace {

struct DtypeInfo {
  const char* name;
  int64_t size;
  bool floating;
};

// The order is the order `dtype_names()` lists and error messages print.
constexpr std::array<DtypeInfo, 10> kDtypes{{
    {"float32", 4, true},
    {"float64", 8, true},
    {"float16", 2, true},
    {"bfloat16", 2, true},
    {"int64", 8, false},
    {"int32", 4, false},
    {"int16", 2, false},
    {"int8", 1, false},
    {"uint8", 1, false},
    {"bool", 1, false},
}};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

}  // namespace

int64_t dtype_size(const std::string& dtype) {
  if (const DtypeInfo* info = find_dtype(dtype)) return info->size;
  std::string known;
  for (const std::string& name : dtype_names()) known += (known.empty() ? "" : ", ") + name;
  fail(ExitCode::kUsage, "unknown dtype '" + dtype + "'; mfsdp knows: " + known);
}

bool is_floating_dtype(const std::string& dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  return info != nullptr && info->floating;
}

std::vector<std::string> unit_modules(const Unit& unit) {
  return unit.modules.empty() ? std::vector<std::string>{unit.name} : unit.modules;
}

std::string unit_name_of(const std::vector<std::string>& paths) {
  std::string name;
  for (const std::string& path : paths) {
    if (!name.empty()) name += kModuleJoiner;
    name += path.empty() ? kRootName : path;
  }
  return name;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> result;
    for (const DtypeInfo& info : kDtypes) result.emplace_back(info.name);
    return result;
  }();
  return names;
}

}  // namespace mfsdp::schema
