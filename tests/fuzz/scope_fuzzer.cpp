// A scope file through what `mfsdp plan --scope` does with it before the model matters: read
// it (mesh, policy, fully_shard, training) and select its units in a small fixed model, the
// path globs and type names against module paths of several depths.

#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/scope_file.h"
#include "planner/torchscript/model_ir.h"
#include "planner/unit_selector.h"
#include "schema/error.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

void add_module(planner::ModelIR& model, const std::string& path, const std::string& type) {
  planner::ModuleNode node;
  node.path = path;
  node.type = type;
  const size_t dot = path.rfind('.');
  node.parent =
      path.empty() ? -1 : model.find_module(dot == std::string::npos ? "" : path.substr(0, dot));
  const int index = static_cast<int>(model.modules.size());
  if (node.parent >= 0) model.modules[node.parent].children.push_back(index);
  model.modules.push_back(node);
}

// A GPT-like tree (what scope files are written for) and one deep chain for '**'.
planner::ModelIR sample_model() {
  planner::ModelIR model;
  add_module(model, "", "__torch__.fixtures.TinyGPT");
  add_module(model, "wte", "__torch__.torch.nn.modules.sparse.Embedding");
  add_module(model, "layers", "__torch__.torch.nn.modules.container.ModuleList");
  for (const std::string layer : {"layers.0", "layers.1", "layers.10"}) {
    add_module(model, layer, "__torch__.fixtures.Block");
    add_module(model, layer + ".attn", "__torch__.fixtures.Attention");
    add_module(model, layer + ".mlp", "__torch__.fixtures.MLP");
  }
  std::string deep;
  for (const std::string segment : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}) {
    deep += (deep.empty() ? "" : ".") + segment;
    add_module(model, deep, "__torch__.fixtures.Chain");
  }
  add_module(model, "lm_head", "__torch__.torch.nn.modules.linear.Linear");
  return model;
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  static fuzz::InputFile input;
  static const planner::ModelIR model = fuzz::sample_model();
  fuzz::expect_only_errors([&] {
    const planner::ScopeFile scope = planner::read_scope_file(input.write(data, size));
    for (const auto& selector : scope.units) selector.origin();
    planner::select_units(model, scope.units);
  });
  return 0;
}
