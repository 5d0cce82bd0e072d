#include "executor/runtime/initial_weights.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "planner/torchscript/mapped_archive.h"
#include "planner/torchscript/torch_model.h"
#include "safetensors/name_map.h"
#include "safetensors/safetensors.h"
#include "schema/digest.h"
#include "schema/error.h"

namespace mfsdp::executor {

struct InitialWeights::Match {
  std::string name;  // the module's name for it
  const safetensors::File* file = nullptr;
  const safetensors::TensorInfo* info = nullptr;
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool transpose = false;
};

// A file tensor under the model's name for it.
struct InitialWeights::Source {
  std::string file_name;
  const safetensors::Checkpoint::Entry* entry = nullptr;
  bool transpose = false;
};

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream text;
  text << "[";
  for (size_t i = 0; i < shape.size(); ++i) text << (i ? ", " : "") << shape[i];
  text << "]";
  return text.str();
}

// The first few of a list, then how many more: the whole message stays one readable line.
std::string listed(const std::string& what, const std::vector<std::string>& items) {
  constexpr size_t kShown = 5;
  std::string text = what + " (" + std::to_string(items.size()) + "): ";
  for (size_t i = 0; i < items.size() && i < kShown; ++i) text += (i ? ", " : "") + items[i];
  if (items.size() > kShown) text += ", and " + std::to_string(items.size() - kShown) + " more";
  return text;
}

bool floating(c10::ScalarType type) {
  return c10::isFloatingType(type);
}

}  // namespace

InitialWeights::InitialWeights(const std::string& path, const schema::Plan& plan,
                               const torch::jit::Module& module, const std::string& name_map)
    : file_(std::make_unique<safetensors::Checkpoint>(path)) {
  std::set<std::string> used;  // file names
  std::vector<std::string> missing, unexpected, wrong_shape, wrong_dtype, clashes;
  std::map<std::string, int> conversions;  // "bfloat16 -> float32" -> tensors
  // The file's tensors by the model's names for them.
  const safetensors::NameMap map =
      name_map.empty() ? safetensors::NameMap() : safetensors::NameMap::load(name_map);
  std::map<std::string, Source> sources;
  size_t skipped = 0;
  for (const auto& [name, entry] : file_->tensors()) {
    const safetensors::Renamed renamed = map.apply(name);
    if (!renamed.name) {
      used.insert(name);
      ++skipped;
      continue;
    }
    const auto [it, fresh] =
        sources.emplace(*renamed.name, Source{name, &entry, renamed.transpose});
    if (!fresh) clashes.push_back(it->second.file_name + " and " + name + " -> " + *renamed.name);
  }
  auto find = [&](const std::string& name) -> const Source* {
    auto it = sources.find(name);
    return it == sources.end() ? nullptr : &it->second;
  };
  auto check = [&](Match& match, const Source& source, const std::vector<int64_t>& shape,
                   c10::ScalarType want) {
    const safetensors::Checkpoint::Entry& entry = *source.entry;
    match.file = entry.file;
    match.info = entry.info;
    match.transpose = source.transpose;
    used.insert(entry.info->name);
    std::vector<int64_t> stored = shape;
    if (source.transpose) std::reverse(stored.begin(), stored.end());
    if (entry.info->shape != stored || (source.transpose && shape.size() != 2)) {
      wrong_shape.push_back(entry.info->name + " " + shape_text(entry.info->shape) +
                            (source.transpose ? " (transposed)" : "") + " in the file, " +
                            shape_text(shape) + " in the model");
      return false;
    }
    const auto name = safetensors::schema_dtype(entry.info->dtype);
    const c10::ScalarType have = name ? planner::scalar_type_of(*name) : c10::ScalarType::Undefined;
    if (!name || (have != want && !(floating(have) && floating(want)))) {
      wrong_dtype.push_back(entry.info->name + " " + safetensors::dtype_name(entry.info->dtype) +
                            " in the file, " + planner::dtype_name_of(want, entry.info->name) +
                            " in the model");
      return false;
    }
    match.dtype = have;
    if (have != want) {
      ++conversions[*name + " -> " + planner::dtype_name_of(want, entry.info->name)];
    }
    return true;
  };
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      const c10::ScalarType want = planner::scalar_type_of(group.dtype);
      for (size_t p = 0; p < group.params.size(); ++p) {
        const schema::ParamLayout& param = group.params[p];
        // A tied weight may be saved under any of its names (transformers keeps one).
        const Source* entry = find(param.name);
        for (size_t a = 0; !entry && a < param.aliases.size(); ++a) entry = find(param.aliases[a]);
        if (!entry) {
          missing.push_back(param.name);
          continue;
        }
        Match match;
        match.name = param.name;
        if (check(match, *entry, param.shape, want)) params_[&group].push_back(match);
        // A file may hold a tied weight under several of its names; the first one is read.
        for (const std::string& alias : param.aliases) {
          if (const Source* other = find(alias)) used.insert(other->file_name);
        }
      }
    }
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    const Source* entry = find(b.name);
    if (!entry) {
      // The model file's value stands, if it has one.
      if (planner::has_no_data(b.value))
        missing.push_back(b.name + " (a buffer the skeleton has no values for)");
      continue;
    }
    Match match;
    match.name = b.name;
    if (check(match, *entry, b.value.sizes().vec(), b.value.scalar_type())) {
      buffers_.push_back(match);
    }
  }
  for (const auto& [name, entry] : file_->tensors()) {
    if (!used.count(name)) unexpected.push_back(name);
  }
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(listed("missing", missing));
  if (!unexpected.empty()) problems.push_back(listed("unexpected", unexpected));
  if (!wrong_shape.empty()) problems.push_back(listed("of another shape", wrong_shape));
  if (!wrong_dtype.empty()) problems.push_back(listed("of another dtype", wrong_dtype));
  if (!clashes.empty()) problems.push_back(listed("given one name by --name-map", clashes));
  if (!problems.empty()) {
    std::string message = "--init-from " + path + " does not fit the model: ";
    for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    fail(ExitCode::kUsage, message +
                               "; nothing was trained. Save the tensors under the model's "
                               "parameter names (the plan's units[].groups[].params[].name) in "
                               "their shapes, or rename them with --name-map "
                               "(docs/large-models.md#name-maps)");
  }
  size_t matched = 0;
  for (const auto& [group, matches] : params_) matched += matches.size();
  description_ = path + ": " + std::to_string(matched) + " parameter(s)";
  if (!buffers_.empty()) description_ += " and " + std::to_string(buffers_.size()) + " buffer(s)";
  if (!name_map.empty()) {
    size_t transposed = 0;
    for (const auto& [group, matches] : params_) {
      for (const Match& match : matches) transposed += match.transpose;
    }
    description_ += " renamed by " + name_map;
    if (transposed) description_ += " (" + std::to_string(transposed) + " transposed)";
    if (skipped) description_ += ", " + std::to_string(skipped) + " tensor(s) of the file skipped";
  }
  if (conversions.empty()) description_ += ", in their dtypes";
  for (const auto& [conversion, count] : conversions) {
    description_ += ", " + conversion + " for " + std::to_string(count);
  }
}

InitialWeights::~InitialWeights() = default;

std::string InitialWeights::layout_digest() const {
  std::ostringstream text;
  for (const auto& [name, entry] : file_->tensors()) {
    text << name << ' ' << safetensors::dtype_name(entry.info->dtype) << ' '
         << shape_text(entry.info->shape) << ' ' << entry.info->begin << ' ' << entry.info->end
         << ' ' << entry.file->size() << '\n';
  }
  return schema::sha256_hex(text.str());
}

namespace {

at::Tensor over_file(const safetensors::File& file, const safetensors::TensorInfo& info,
                     c10::ScalarType dtype, bool transpose) {
  // Read only: the tensor is a source of copies, never written.
  const at::Tensor stored = at::from_blob(const_cast<uint8_t*>(file.data(info)), info.shape,
                                          at::TensorOptions().dtype(dtype));
  return transpose ? stored.t() : stored;
}

}  // namespace

std::vector<at::Tensor> InitialWeights::values(const schema::Group& group) const {
  std::vector<at::Tensor> out;
  for (const Match& match : params_.at(&group)) {
    out.push_back(over_file(*match.file, *match.info, match.dtype, match.transpose));
  }
  return out;
}

void InitialWeights::release(const schema::Group& group) const {
  for (const Match& match : params_.at(&group)) match.file->release(*match.info);
}

void InitialWeights::load_buffers(torch::jit::Module& module) const {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) buffers[b.name] = b.value;
  for (const Match& match : buffers_) {
    at::Tensor& buffer = buffers.at(match.name);
    // A skeleton's buffer gets memory of its own first (its aliases keep sharing it).
    planner::allocate_missing_data(buffer);
    buffer.copy_(over_file(*match.file, *match.info, match.dtype, match.transpose));
    match.file->release(*match.info);
  }
}

}  // namespace mfsdp::executor
