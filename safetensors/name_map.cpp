#include "safetensors/name_map.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "schema/error.h"

namespace mfsdp::safetensors {
namespace {

// A pattern split at its wildcards: the literal pieces, and the wildcards between them.
struct Pieces {
  std::vector<std::string> text;      // one more than wildcards
  std::vector<std::string> wildcard;  // "*" or "**"
};

Pieces split(const std::string& pattern) {
  Pieces out;
  out.text.emplace_back();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '*') {
      out.text.back() += pattern[i];
      continue;
    }
    const bool two = i + 1 < pattern.size() && pattern[i + 1] == '*';
    out.wildcard.push_back(two ? "**" : "*");
    if (two) ++i;
    out.text.emplace_back();
  }
  return out;
}

std::string escaped(const std::string& text) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (const char c : text) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

NameMap NameMap::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ExitCode::kUsage, "--name-map " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), "--name-map " + path);
}

NameMap NameMap::parse(const std::string& text, const std::string& origin) {
  const std::string how = " (docs/large-models.md#name-maps)";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ExitCode::kUsage, origin + ": not JSON: " + e.what() + how);
  }
  if (!doc.is_object() || doc.size() != 1 || !doc.contains("rules") || !doc["rules"].is_array()) {
    fail(ExitCode::kUsage, origin + ": expected an object with one key, \"rules\", a list" + how);
  }
  NameMap map;
  for (size_t i = 0; i < doc["rules"].size(); ++i) {
    const nlohmann::json& rule = doc["rules"][i];
    const std::string where = origin + ": rules[" + std::to_string(i) + "]";
    if (!rule.is_object()) fail(ExitCode::kUsage, where + " is not an object" + how);
    for (const auto& [key, value] : rule.items()) {
      if (key != "file" && key != "model" && key != "transpose") {
        fail(ExitCode::kUsage, where + " has key \"" + key +
                                   "\"; a rule has \"file\", \"model\" and \"transpose\"" + how);
      }
    }
    if (!rule.contains("file") || !rule["file"].is_string() ||
        rule["file"].get<std::string>().empty()) {
      fail(ExitCode::kUsage, where + " needs \"file\", a name pattern" + how);
    }
    if (!rule.contains("model") || !(rule["model"].is_string() || rule["model"].is_null())) {
      fail(ExitCode::kUsage, where + " needs \"model\", a name pattern or null (skip)" + how);
    }
    if (rule.contains("transpose") && !rule["transpose"].is_boolean()) {
      fail(ExitCode::kUsage, where + ": \"transpose\" is true or false" + how);
    }
    const std::string file = rule["file"];
    const Pieces from = split(file);
    Rule out;
    std::string regex;
    for (size_t w = 0; w < from.wildcard.size(); ++w) {
      regex += escaped(from.text[w]) + (from.wildcard[w] == "**" ? "(.+)" : "([^.]+)");
    }
    regex += escaped(from.text.back());
    out.file = std::regex(regex, std::regex::ECMAScript);
    out.transpose = rule.value("transpose", false);
    if (rule["model"].is_null()) {
      out.skip = true;
    } else {
      const std::string model = rule["model"];
      const Pieces to = split(model);
      if (to.wildcard != from.wildcard) {
        fail(ExitCode::kUsage, where + ": \"" + model + "\" must have the wildcards of \"" + file +
                                   "\", in the same order (* is one part of a name, ** one or "
                                   "more)" +
                                   how);
      }
      out.model = to.text;
    }
    map.rules_.push_back(std::move(out));
  }
  return map;
}

Renamed NameMap::apply(const std::string& file_name) const {
  for (const Rule& rule : rules_) {
    std::smatch match;
    if (!std::regex_match(file_name, match, rule.file)) continue;
    Renamed out;
    out.transpose = rule.transpose;
    if (rule.skip) return out;
    std::string name = rule.model[0];
    for (size_t w = 1; w < rule.model.size(); ++w) name += match[w].str() + rule.model[w];
    out.name = name;
    return out;
  }
  return Renamed{file_name, false};
}

}  // namespace mfsdp::safetensors
