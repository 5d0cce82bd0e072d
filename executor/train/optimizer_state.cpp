#include "executor/train/optimizer_state.h"

#include <sstream>
#include <type_traits>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// LibTorch keys state by the parameter's TensorImpl: as a string in 1.x, as the pointer in 2.x.
using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using StateKey = typename StateMap::key_type;

template <typename Key = StateKey>
Key key_of(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    // What 1.x's c10::guts::to_string (gone from 2.11's headers) makes of the pointer.
    std::ostringstream text;
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return text.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

std::vector<at::Tensor> parameters(torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  return params;
}

enum class Kind { kSgd, kAdam, kAdamW };

Kind kind_of(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return Kind::kSgd;
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return Kind::kAdamW;
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return Kind::kAdam;
  fail(ExitCode::kUsage, "only SGD, Adam and AdamW state can be resharded");
}

template <typename AdamState>
ParamOptimizerState adam_state(const AdamState& s) {
  ParamOptimizerState out;
  out.step = s.step();
  out.tensors = {{"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}};
  if (s.max_exp_avg_sq().defined()) out.tensors.emplace_back("max_exp_avg_sq", s.max_exp_avg_sq());
  return out;
}

const at::Tensor& named(const ParamOptimizerState& state, const std::string& name,
                        bool required = true) {
  static const at::Tensor none;
  for (const auto& [n, tensor] : state.tensors) {
    if (n == name) return tensor;
  }
  if (required) {
    fail(ExitCode::kUsage, "optimizer state lacks '" + name +
                               "' for its kind; use another "
                               "checkpoint");
  }
  return none;
}

template <typename AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> make_adam_state(
    const ParamOptimizerState& state) {
  auto out = std::make_unique<AdamState>();
  out->step(state.step);
  out->exp_avg(named(state, "exp_avg"));
  out->exp_avg_sq(named(state, "exp_avg_sq"));
  out->max_exp_avg_sq(named(state, "max_exp_avg_sq", /*required=*/false));
  return out;
}

}  // namespace

std::vector<std::optional<ParamOptimizerState>> param_states(torch::optim::Optimizer& optimizer) {
  const Kind kind = kind_of(optimizer);
  std::vector<std::optional<ParamOptimizerState>> states;
  for (const at::Tensor& param : parameters(optimizer)) {
    const auto found = optimizer.state().find(key_of(param));
    if (found == optimizer.state().end()) {
      states.emplace_back();
      continue;
    }
    const torch::optim::OptimizerParamState& state = *found->second;
    switch (kind) {
      case Kind::kSgd: {
        const auto& sgd = static_cast<const torch::optim::SGDParamState&>(state);
        ParamOptimizerState out;
        if (sgd.momentum_buffer().defined()) {
          out.tensors.emplace_back("momentum_buffer", sgd.momentum_buffer());
        }
        states.push_back(std::move(out));
        break;
      }
      case Kind::kAdam:
        states.push_back(adam_state(static_cast<const torch::optim::AdamParamState&>(state)));
        break;
      case Kind::kAdamW:
        states.push_back(adam_state(static_cast<const torch::optim::AdamWParamState&>(state)));
        break;
    }
  }
  return states;
}

void set_param_states(torch::optim::Optimizer& optimizer,
                      std::vector<std::optional<ParamOptimizerState>> states) {
  const Kind kind = kind_of(optimizer);
  const std::vector<at::Tensor> params = parameters(optimizer);
  if (states.size() != params.size()) {
    fail(ExitCode::kUsage, "optimizer state for " + std::to_string(states.size()) +
                               " parameters given to an optimizer of " +
                               std::to_string(params.size()));
  }
  optimizer.state().clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!states[i]) continue;
    for (auto& named_tensor : states[i]->tensors) {
      at::Tensor& tensor = named_tensor.second;
      if (tensor.defined() && tensor.device() != params[i].device()) {
        tensor = tensor.to(params[i].device());
      }
    }
    std::unique_ptr<torch::optim::OptimizerParamState> state;
    switch (kind) {
      case Kind::kSgd: {
        auto sgd = std::make_unique<torch::optim::SGDParamState>();
        sgd->momentum_buffer(named(*states[i], "momentum_buffer", /*required=*/false));
        state = std::move(sgd);
        break;
      }
      case Kind::kAdam:
        state = make_adam_state<torch::optim::AdamParamState>(*states[i]);
        break;
      case Kind::kAdamW:
        state = make_adam_state<torch::optim::AdamWParamState>(*states[i]);
        break;
    }
    optimizer.state()[key_of(params[i])] = std::move(state);
  }
}

std::vector<std::optional<ParamOptimizerState>> read_param_states(
    torch::serialize::InputArchive& archive, const std::string& where) {
  auto refuse = [&](const std::string& why) {
    fail(ExitCode::kUsage,
         where + ": its optimizer state cannot be read (" + why + "); use another checkpoint");
  };
  torch::serialize::InputArchive groups, states;
  if (!archive.try_read("param_groups", groups) || !archive.try_read("state", states)) {
    refuse("no param_groups or state");
  }
  auto count = [&](torch::serialize::InputArchive& in, const std::string& key) {
    at::Tensor size;
    if (!in.try_read(key, size) || size.numel() != 1) refuse("no " + key);
    return size.item<int64_t>();
  };
  std::vector<std::optional<ParamOptimizerState>> out;
  const int64_t group_count = count(groups, "param_groups/size");
  for (int64_t g = 0; g < group_count; ++g) {
    torch::serialize::InputArchive group;
    if (!groups.try_read("param_groups/" + std::to_string(g), group)) {
      refuse("no parameter group " + std::to_string(g));
    }
    const int64_t param_count = count(group, "params/size");
    for (int64_t p = 0; p < param_count; ++p) {
      c10::IValue key;
      if (!group.try_read("params/" + std::to_string(p), key) || !key.isString()) {
        refuse("no key for parameter " + std::to_string(p));
      }
      torch::serialize::InputArchive saved;
      if (!states.try_read(key.toStringRef(), saved)) {
        out.emplace_back();  // no state yet (before its first step)
        continue;
      }
      ParamOptimizerState state;
      c10::IValue step;
      if (saved.try_read("step", step) && step.isInt()) state.step = step.toInt();
      for (const char* name : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
        at::Tensor tensor;
        if (saved.try_read(name, tensor)) state.tensors.emplace_back(name, tensor);
      }
      out.push_back(std::move(state));
    }
  }
  return out;
}

}  // namespace mfsdp::executor
