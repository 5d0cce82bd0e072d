#include "planner/sharded_model.h"

#include "planner/torchscript/model_loader.h"
#include "schema/digest.h"

namespace mfsdp::planner {

ShardedModel::ShardedModel(ModelIR ir, std::string path, std::string sha256)
    : ir_(std::move(ir)),
      path_(std::move(path)),
      sha256_(std::move(sha256)),
      unit_scope_(ir_.modules.size(), -1) {}

ShardedModel ShardedModel::load(const std::string& path) {
  ModelIR ir = load_model(path);
  return ShardedModel(std::move(ir), path, schema::sha256_file_hex(path));
}

schema::ModelInfo ShardedModel::info() const {
  schema::ModelInfo info;
  info.path = path_;
  info.sha256 = sha256_;
  info.structural_hash = structural_hash(ir_);
  info.modules = static_cast<int64_t>(ir_.modules.size());
  for (const auto& t : ir_.tensors) {
    if (!t.is_parameter) continue;
    ++info.parameters;
    info.parameter_numel += t.numel();
  }
  return info;
}

}  // namespace mfsdp::planner
