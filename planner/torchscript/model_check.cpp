#include "planner/torchscript/model_check.h"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "planner/torchscript/model_loader.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

std::string quote(const std::string& name) {
  const std::string literal =
      nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return "'" + literal.substr(1, literal.size() - 2) + "'";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

class Comparison {
 public:
  Comparison(const ModelIR& model, const std::string& model_path)
      : model_(model), in_model_(" in " + model_path) {
    for (size_t t = 0; t < model.tensors.size(); ++t) {
      for (const auto& name : model.tensors[t].names) tensor_by_name_.emplace(name, t);
    }
  }

  void structure(const schema::Plan& plan) {
    const std::string hash = structural_hash(model_);
    if (plan.model.structural_hash != hash) {
      report("model.structural_hash", "is " + plan.model.structural_hash + ", but the model" +
                                          in_model_ + " hashes to " + hash +
                                          ": the plan was made for a model of another structure");
    }
  }

  void unit(const schema::Unit& unit, const std::string& path) {
    std::string type;
    for (const std::string& name : schema::unit_modules(unit)) {
      const int module = model_.find_module(name);
      if (module < 0) {
        return report(path + (unit.modules.empty() ? ".name" : ".modules"),
                      quote(name) + " is not a module" + in_model_);
      }
      if (!type.empty()) type += schema::kModuleJoiner;
      type += model_.modules[module].type;
    }
    if (unit.type != type) {
      report(path + ".type", "is " + quote(unit.type) + ", but " +
                                 (unit.modules.empty() ? "module " : "modules ") +
                                 quote(unit.name) + in_model_ + " " +
                                 (unit.modules.empty() ? "is a " : "are ") + quote(type));
    }
  }

  void parameter(const schema::Group& group, const std::string& group_path,
                 const schema::ParamLayout& param, const std::string& path) {
    const int main = find_parameter(param.name, path + ".name");
    for (size_t k = 0; k < param.aliases.size(); ++k) {
      const int alias = find_parameter(param.aliases[k], at(path + ".aliases", k));
      if (alias >= 0 && main >= 0 && alias != main) {
        report(at(path + ".aliases", k), quote(param.aliases[k]) + " is a tensor of its own" +
                                             in_model_ + ", not tied to " + quote(param.name));
        covered_.insert(alias);
      }
    }
    if (main < 0) return;
    const TensorInfo& tensor = model_.tensors[main];
    if (const auto [it, fresh] = claimed_by_.emplace(main, param.name); !fresh) {
      return report(path + ".name", quote(param.name) + " and " + quote(it->second) +
                                        " are one tensor (tied)" + in_model_ +
                                        ", but the plan has them as two parameters");
    }
    covered_.insert(main);
    if (param.shape != tensor.shape) {
      report(path + ".shape", "is " + shape_text(param.shape) + ", but " + quote(param.name) +
                                  in_model_ + " is " + shape_text(tensor.shape));
    }
    if (group.dtype != tensor.dtype) {
      report(group_path + ".dtype", "is " + group.dtype + ", but " + quote(param.name) + in_model_ +
                                        " is " + tensor.dtype);
    }
    if (group.requires_grad != tensor.requires_grad) {
      report(group_path + ".requires_grad",
             std::string("is ") + (group.requires_grad ? "true" : "false") + ", but " +
                 quote(param.name) + in_model_ +
                 (tensor.requires_grad ? " requires grad" : " does not require grad"));
    }
    for (const auto& name : tensor.names) {
      const bool listed =
          name == param.name ||
          std::find(param.aliases.begin(), param.aliases.end(), name) != param.aliases.end();
      if (!listed) {
        report(path + ".aliases", "misses " + quote(name) + ", which" + in_model_ +
                                      " is the same tensor as " + quote(param.name) + " (tied)");
      }
    }
  }

  // Model parameters no plan parameter names: the executor would leave them unsharded.
  void uncovered() {
    for (size_t t = 0; t < model_.tensors.size(); ++t) {
      const TensorInfo& tensor = model_.tensors[t];
      if (!tensor.is_parameter || covered_.count(static_cast<int>(t))) continue;
      report("units", "parameter " + quote(tensor.names.front()) + " (" + tensor.dtype + " " +
                          shape_text(tensor.shape) + ")" + in_model_ + " is in no unit");
    }
  }

  std::vector<schema::Problem> take() { return std::move(problems_); }

 private:
  void report(const std::string& path, const std::string& message) {
    problems_.push_back({path, message});
  }

  // The tensor a plan parameter name refers to, or -1 after reporting why there is none.
  int find_parameter(const std::string& name, const std::string& path) {
    const auto it = tensor_by_name_.find(name);
    if (it == tensor_by_name_.end()) {
      report(path, quote(name) + " is not a parameter" + in_model_);
      return -1;
    }
    if (!model_.tensors[it->second].is_parameter) {
      report(path, quote(name) + " is a buffer" + in_model_ + ", not a parameter");
      return -1;
    }
    return static_cast<int>(it->second);
  }

  const ModelIR& model_;
  std::string in_model_;
  std::map<std::string, size_t> tensor_by_name_;
  std::map<int, std::string> claimed_by_;  // tensor -> the plan parameter that names it
  std::set<int> covered_;
  std::vector<schema::Problem> problems_;
};

}  // namespace

std::vector<schema::Problem> compare_plan_with_model(const schema::Plan& plan, const ModelIR& model,
                                                     const std::string& model_path) {
  Comparison comparison(model, model_path);
  comparison.structure(plan);
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const schema::Unit& unit = plan.units[u];
    const std::string unit_path = at("units", u);
    comparison.unit(unit, unit_path);
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      const std::string group_path = at(unit_path + ".groups", g);
      for (size_t p = 0; p < unit.groups[g].params.size(); ++p) {
        comparison.parameter(unit.groups[g], group_path, unit.groups[g].params[p],
                             at(group_path + ".params", p));
      }
    }
  }
  comparison.uncovered();
  return comparison.take();
}

std::vector<schema::Problem> check_plan_against_model(const schema::Plan& plan,
                                                      const std::string& model_path) {
  return compare_plan_with_model(plan, load_model(model_path), model_path);
}

void require_plan_fits_model(const schema::Plan& plan, const ModelIR& model,
                             const std::string& model_path, const std::string& plan_name,
                             const FitHints& hints) {
  const std::vector<schema::Problem> problems = compare_plan_with_model(plan, model, model_path);
  if (problems.empty()) return;
  // The hash only says that something differs; a unit or parameter says what.
  const auto is_hash = [](const schema::Problem& p) { return p.path == "model.structural_hash"; };
  const bool other_model = std::any_of(problems.begin(), problems.end(), is_hash);
  const auto specific = std::find_if_not(problems.begin(), problems.end(), is_hash);
  const schema::Problem& named = specific != problems.end() ? *specific : problems.front();
  std::string message = model_path + " does not match " + plan_name + ": " + named.str();
  if (problems.size() > 1) message += " (and " + std::to_string(problems.size() - 1) + " more)";
  throw Error(ExitCode::kUsage,
              message + "; " + (other_model ? hints.other_model : hints.edited_plan));
}

}  // namespace mfsdp::planner
