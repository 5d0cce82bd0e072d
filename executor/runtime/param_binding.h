#pragma once
// Parameters as attributes of the TorchScript object graph. A unit's gathered parameters are
// bound by replacing the attributes that hold them (a tied parameter has several: its name
// and its aliases) with tensors over the unit's slot, and unbound by replacing them with
// empty tensors; the model never holds a full parameter otherwise.

#include <map>
#include <string>
#include <vector>

#include <torch/script.h>

#include "schema/plan.h"

namespace mfsdp::executor {

class FlatGroup;

// One attribute of one module object.
struct AttributeRef {
  c10::intrusive_ptr<c10::ivalue::Object> owner;
  size_t index = 0;
};

// Per parameter of a group (layout order): every attribute that holds it, its own name first.
using GroupBinding = std::vector<std::vector<AttributeRef>>;

class ModelAttributes {
 public:
  explicit ModelAttributes(const torch::jit::Module& model);
  // Where `group`'s parameters and aliases live. The plan was checked against the model
  // (structural hash), so every name resolves.
  GroupBinding locate(const schema::Group& group) const;

 private:
  AttributeRef locate(const std::string& fqn) const;
  std::map<std::string, torch::jit::Module> modules_;  // by path, "" for the root
};

// The values the model holds now, one per parameter (its own name's).
std::vector<at::Tensor> current_values(const GroupBinding& binding);
// Every attribute gets its parameter's tensor over the group's slot (FlatGroup::param, a new
// one per registration, so that each use has its own autograd node).
void bind_params(const GroupBinding& binding, FlatGroup& group);
// Every attribute gets `empty`.
void unbind_params(const GroupBinding& binding, const at::Tensor& empty);
// Every attribute gets an empty tensor of its value's dtype on `device`: the full values are
// dropped once the shards hold them.
void drop_full_values(const GroupBinding& binding, at::Device device);

}  // namespace mfsdp::executor
