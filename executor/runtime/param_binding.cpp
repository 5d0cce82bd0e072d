#include "executor/runtime/param_binding.h"

#include "executor/runtime/flat_group.h"

namespace mfsdp::executor {

ModelAttributes::ModelAttributes(const torch::jit::Module& model) {
  for (const auto& m : model.named_modules()) modules_.emplace(m.name, m.value);
}

AttributeRef ModelAttributes::locate(const std::string& fqn) const {
  const auto dot = fqn.rfind('.');
  const std::string path = dot == std::string::npos ? "" : fqn.substr(0, dot);
  const std::string attr = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
  const auto owner = modules_.at(path)._ivalue();
  return {owner, owner->type()->getAttributeSlot(attr)};
}

GroupBinding ModelAttributes::locate(const schema::Group& group) const {
  GroupBinding binding;
  for (const auto& param : group.params) {
    std::vector<AttributeRef> registrations = {locate(param.name)};
    for (const auto& alias : param.aliases) registrations.push_back(locate(alias));
    binding.push_back(std::move(registrations));
  }
  return binding;
}

std::vector<at::Tensor> current_values(const GroupBinding& binding) {
  std::vector<at::Tensor> values;
  for (const auto& registrations : binding) {
    values.push_back(registrations[0].owner->getSlot(registrations[0].index).toTensor());
  }
  return values;
}

void bind_params(const GroupBinding& binding, FlatGroup& group) {
  for (size_t p = 0; p < binding.size(); ++p) {
    for (const AttributeRef& ref : binding[p]) ref.owner->setSlot(ref.index, group.param(p));
  }
}

void unbind_params(const GroupBinding& binding, const at::Tensor& empty) {
  for (const auto& registrations : binding) {
    for (const AttributeRef& ref : registrations) ref.owner->setSlot(ref.index, empty);
  }
}

void drop_full_values(const GroupBinding& binding, at::Device device) {
  for (const auto& registrations : binding) {
    for (const AttributeRef& ref : registrations) {
      const at::Tensor value = ref.owner->getSlot(ref.index).toTensor();
      ref.owner->setSlot(ref.index, at::empty({0}, value.options().device(device)));
    }
  }
}

}  // namespace mfsdp::executor
