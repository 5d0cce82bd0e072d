#pragma once
// `mfsdp run --init-from WEIGHTS --name-map MAP`: how the tensor names of a weights file become a
// model's parameter names (docs/large-models.md#name-maps). A map is a JSON file of rules, tried
// in order; the first whose `file` pattern matches a name gives its `model` name (null: the
// tensor is not the model's, and is skipped) and whether it is stored transposed. Names no rule
// matches stay as they are. In a pattern `*` stands for one part of a dotted name (no dots) and
// `**` for one or more parts; the model pattern has the same wildcards, in the same order, and
// they take what the file pattern's matched:
//
//   {"rules": [
//     {"file": "h.*.attn.c_attn.weight", "model": "layers.*.attn.qkv.weight", "transpose": true},
//     {"file": "h.*.attn.bias", "model": null},
//     {"file": "**", "model": "transformer.**"}
//   ]}

#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace mfsdp::safetensors {

struct Renamed {
  std::optional<std::string> name;  // the model's name for it; none: not the model's
  bool transpose = false;           // stored as the transpose of the model's 2-D parameter
};

class NameMap {
 public:
  NameMap() = default;  // every name stays
  // Error(kUsage), one line naming the file and what is wrong, for a map that is not JSON, has
  // keys other than the documented ones, or a rule whose patterns do not pair up.
  static NameMap load(const std::string& path);
  static NameMap parse(const std::string& text, const std::string& origin);

  Renamed apply(const std::string& file_name) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Rule {
    std::regex file;
    std::vector<std::string> model;  // literal text around the wildcards, one more than them
    bool skip = false;
    bool transpose = false;
  };
  std::vector<Rule> rules_;
};

}  // namespace mfsdp::safetensors
