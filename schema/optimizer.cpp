#include "schema/optimizer.h"

namespace mfsdp::schema {

const std::vector<OptimizerKind>& optimizer_kinds() {
  static const std::vector<OptimizerKind> kinds = {
      {"sgd", 1, 20},
      {"adam", 2, 28},
      {"adamw", 2, 28},
  };
  return kinds;
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const OptimizerKind& k : optimizer_kinds()) names.emplace_back(k.name);
  return names;
}

std::string optimizer_choices() {
  const std::vector<std::string> names = optimizer_names();
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

const OptimizerKind* find_optimizer(const std::string& name) {
  for (const OptimizerKind& k : optimizer_kinds()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

}  // namespace mfsdp::schema
