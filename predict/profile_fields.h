#pragma once
// Reading a profile's JSON field by field (predict/profile.cpp, predict/compute_rates.cpp): every
// error names the field, and an object's unknown fields are refused. Internal to predict/.

#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "schema/error.h"

namespace mfsdp::predict::profile_json {

using nlohmann::json;

[[noreturn]] inline void bad(const std::string& where, const std::string& what) {
  fail(ExitCode::kUsage, "profile: " + where + ": " + what);
}

// A JSON object read field by field; finish() refuses fields nobody asked for.
class Fields {
 public:
  Fields(const json& value, std::string where) : value_(value), where_(std::move(where)) {
    if (!value.is_object()) bad(where_, "must be an object");
  }

  const json* find(const std::string& key) {
    seen_.insert(key);
    const auto it = value_.find(key);
    return it == value_.end() ? nullptr : &*it;
  }
  const json& need(const std::string& key) {
    const json* v = find(key);
    if (v == nullptr) bad(at(key), "is missing");
    return *v;
  }
  std::string text(const std::string& key) {
    const json& v = need(key);
    if (!v.is_string()) bad(at(key), "must be a string");
    return v.get<std::string>();
  }
  double number(const json& v, const std::string& where) {
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      bad(where, "must be a finite number >= 0");
    }
    return v.get<double>();
  }
  double number(const std::string& key) { return number(need(key), at(key)); }
  int64_t whole(const std::string& key, int64_t minimum) {
    const json& v = need(key);
    if (!v.is_number_integer() || v.get<int64_t>() < minimum) {
      bad(at(key), "must be a whole number >= " + std::to_string(minimum));
    }
    return v.get<int64_t>();
  }
  std::string at(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }

  void finish() const {
    for (auto it = value_.begin(); it != value_.end(); ++it) {
      if (!seen_.count(it.key())) bad(at(it.key()), "is not a profile field");
    }
  }

 private:
  const json& value_;
  std::string where_;
  std::set<std::string> seen_;
};

}  // namespace mfsdp::predict::profile_json
