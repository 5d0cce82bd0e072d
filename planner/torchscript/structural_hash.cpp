// structural_hash: what a plan depends on in a model, and nothing else (not the weights).
#include <sstream>

#include "planner/torchscript/model_loader.h"
#include "schema/digest.h"

namespace mfsdp::planner {
namespace {

void write_tensor(std::ostringstream& out, const char* kind, const std::string& name,
                  const TensorInfo& t) {
  out << kind << ' ' << name << ' ' << t.dtype << " [";
  for (size_t i = 0; i < t.shape.size(); ++i) out << (i ? "," : "") << t.shape[i];
  out << "] " << (t.requires_grad ? "grad" : "frozen");
  if (name != t.names.front()) out << " tied " << t.names.front();
  out << '\n';
}

}  // namespace

std::string structural_hash(const ModelIR& model) {
  std::ostringstream out;
  for (const ModuleNode& m : model.modules) {
    out << "module " << display_name(m.path) << ' ' << m.type << '\n';
    const std::string prefix = m.path.empty() ? "" : m.path + ".";
    for (int t : m.params) {
      // The local name is the one this module registered the tensor under.
      for (const auto& name : model.tensors[t].names) {
        if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) == std::string::npos) {
          write_tensor(out, "param", name, model.tensors[t]);
        }
      }
    }
    for (int t : m.buffers) {
      for (const auto& name : model.tensors[t].names) {
        if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) == std::string::npos) {
          write_tensor(out, "buffer", name, model.tensors[t]);
        }
      }
    }
  }
  return schema::sha256_hex(out.str());
}

}  // namespace mfsdp::planner
