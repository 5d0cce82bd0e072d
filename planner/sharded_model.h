#pragma once
// A loaded model plus which of its modules are FSDP units and in which scope: the state that
// Megatron-FSDP keeps on the modules themselves.

#include <string>
#include <vector>

#include "planner/torchscript/model_ir.h"
#include "schema/plan.h"

namespace mfsdp::planner {

class ShardedModel {
 public:
  // `path` is recorded in plans as given; `sha256` is the file's content hash.
  ShardedModel(ModelIR ir, std::string path, std::string sha256);
  // load_model + sha256 of the file.
  static ShardedModel load(const std::string& path);

  const ModelIR& ir() const { return ir_; }
  const std::string& path() const { return path_; }
  schema::ModelInfo info() const;
  // The scope that made `module` a unit, or -1.
  int unit_scope(int module) const { return unit_scope_[module]; }

 private:
  friend class ShardingScope;
  ModelIR ir_;
  std::string path_;
  std::string sha256_;
  std::vector<int> unit_scope_;
  int scopes_opened_ = 0;
};

}  // namespace mfsdp::planner
