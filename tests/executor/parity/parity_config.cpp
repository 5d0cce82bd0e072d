#include "tests/executor/parity/parity_config.h"

#include <fstream>
#include <stdexcept>

namespace mfsdp::testing {

executor::OptimizerConfig parity_optimizer(const std::string& kind) {
  executor::OptimizerConfig c;
  c.kind = kind;
  if (kind == "sgd") {
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 1e-4;
  } else {
    c.lr = 1e-3;
    c.weight_decay = 0.01;
  }
  return c;
}

// A list of (name, tensor) in a TorchScript-free pickle: names and flattened values.
void save_parity_result(const std::string& path, const std::map<std::string, at::Tensor>& params,
                        const std::vector<double>& losses) {
  std::vector<at::Tensor> tensors;
  std::string names;
  for (const auto& [name, value] : params) {
    names += name + "\n";
    tensors.push_back(value.detach().contiguous());
  }
  tensors.push_back(torch::tensor(losses, torch::kDouble));
  torch::save(tensors, path);
  std::ofstream(path + ".names") << names;
}

void load_parity_result(const std::string& path, std::map<std::string, at::Tensor>& params,
                        std::vector<double>& losses) {
  std::vector<at::Tensor> tensors;
  torch::load(tensors, path);
  std::ifstream in(path + ".names");
  std::string name;
  size_t i = 0;
  while (std::getline(in, name)) params[name] = tensors.at(i++);
  const at::Tensor curve = tensors.at(i);
  losses.assign(curve.data_ptr<double>(), curve.data_ptr<double>() + curve.numel());
}

}  // namespace mfsdp::testing
