#include "planner/torchscript/model_ir.h"

#include "schema/plan.h"

namespace mfsdp::planner {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int ModelIR::find_module(const std::string& path) const {
  if (path_index_.size() != modules.size()) {
    path_index_.clear();
    for (size_t i = 0; i < modules.size(); ++i) path_index_.emplace(modules[i].path, i);
  }
  auto it = path_index_.find(path == schema::kRootName ? "" : path);
  return it == path_index_.end() ? -1 : it->second;
}

bool ModelIR::contains(int ancestor, int module) const {
  for (int m = module; m != -1; m = modules[m].parent) {
    if (m == ancestor) return true;
  }
  return false;
}

std::string display_name(const std::string& path) {
  return path.empty() ? schema::kRootName : path;
}

}  // namespace mfsdp::planner
