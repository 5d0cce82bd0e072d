#include "schema/model_path.h"

#include <filesystem>
#include <system_error>

namespace mfsdp::schema {
namespace fs = std::filesystem;

namespace {

fs::path plan_directory(const std::string& plan_path) {
  return fs::path(plan_path).parent_path();
}

bool is_file(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

}  // namespace

std::string model_path_for_plan(const std::string& model, const std::string& plan_path) {
  const fs::path given(model);
  if (given.is_absolute() || model.empty()) return model;
  const fs::path directory = plan_directory(plan_path);
  const fs::path from =
      (directory.empty() ? fs::current_path() : fs::absolute(directory)).lexically_normal();
  const fs::path to = fs::absolute(given).lexically_normal();
  const fs::path relative = to.lexically_relative(from);
  // No relative path between them (another root name): the absolute one still finds it.
  return relative.empty() ? to.string() : relative.generic_string();
}

ModelLocation locate_model(const std::string& recorded, const std::string& plan_path) {
  const fs::path model(recorded);
  if (model.is_absolute() || recorded.empty()) return {recorded, false};
  const fs::path beside_plan = (plan_directory(plan_path) / model).lexically_normal();
  if (is_file(beside_plan) || plan_directory(plan_path).empty()) {
    return {beside_plan.string(), false};
  }
  if (is_file(model)) return {recorded, true};
  return {beside_plan.string(), false};
}

}  // namespace mfsdp::schema
