// Flat-buffer layout of every group: parameter shapes and offsets, padding, shards, and the
// unit and model totals derived from them.

#include <algorithm>
#include <cstdint>
#include <string>

#include "schema/check_context.h"

namespace mfsdp::schema::check {
namespace {

std::string describe_shape(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t dim : shape) text += (text.empty() ? "" : ", ") + std::to_string(dim);
  return "[" + text + "]";
}

// Parameter names and aliases across the whole plan: a tensor is owned by exactly one unit.
class ParamNames {
 public:
  void add(Context& context, const std::string& path, const std::string& name) {
    if (name.empty()) return context.report(path, "is empty");
    const auto [it, fresh] = first_path_.emplace(name, path);
    if (!fresh) context.report(path, "parameter " + quote(name) + " is also " + it->second);
  }

 private:
  std::map<std::string, std::string> first_path_;
};

void check_shape(Context& context, const std::string& path, const ParamLayout& param) {
  for (size_t d = 0; d < param.shape.size(); ++d) {
    if (param.shape[d] < 0) {
      return context.report(at(path + ".shape", d),
                            "negative dimension " + std::to_string(param.shape[d]));
    }
  }
  // Clamped just past INT64_MAX, where no numel can match any more, so Wide cannot overflow.
  const Wide too_many = Wide{INT64_MAX} + 1;
  Wide elements = 1;
  for (int64_t dim : param.shape) elements = std::min(elements * dim, too_many);
  if (elements == too_many) {
    context.report(path + ".numel",
                   "shape " + describe_shape(param.shape) + " has 2^63 or more elements");
  } else if (elements != param.numel) {
    context.report(path + ".numel", "is " + std::to_string(param.numel) + ", but shape " +
                                        describe_shape(param.shape) + " has " +
                                        to_string(elements) + " elements");
  }
}

void check_group(Context& context, const std::string& path, const Group& group, ParamNames& names) {
  const int64_t shard_size = context.plan.mesh.shard_size;
  if (!context.storage_size(group)) {
    context.report(path + ".dtype", "unknown dtype " + quote(group.dtype));
  }
  const std::optional<int64_t> align = context.align_elems(group);

  if (group.params.empty()) context.report(path + ".params", "is empty; a group holds parameters");
  for (size_t k = 0; k < group.params.size(); ++k) {
    const std::string param_path = at(path + ".params", k);
    const ParamLayout& param = group.params[k];
    names.add(context, param_path + ".name", param.name);
    for (size_t a = 0; a < param.aliases.size(); ++a) {
      names.add(context, at(param_path + ".aliases", a), param.aliases[a]);
    }
    check_shape(context, param_path, param);
    if (align && param.offset % *align != 0) {
      context.report(param_path + ".offset", std::to_string(param.offset) +
                                                 " is not a multiple of the alignment, " +
                                                 std::to_string(*align) + " elements");
    }
    if (k > 0) {
      const ParamLayout& previous = group.params[k - 1];
      const Wide previous_end = Wide{previous.offset} + previous.numel;
      if (param.offset < previous.offset) {
        context.report(param_path + ".offset",
                       std::to_string(param.offset) + " comes before the offset " +
                           std::to_string(previous.offset) + " of the previous parameter " +
                           quote(previous.name) + "; params are sorted by offset");
      } else if (param.offset < previous_end) {
        context.report(param_path + ".offset", std::to_string(param.offset) + " overlaps " +
                                                   quote(previous.name) + ", which ends at " +
                                                   to_string(previous_end));
      }
    }
  }
  if (!group.params.empty()) {
    const ParamLayout& last = group.params.back();
    const Wide end = Wide{last.offset} + last.numel;
    if (end != group.numel) {
      context.report(path + ".numel", "is " + std::to_string(group.numel) +
                                          ", but the last parameter ends at " + to_string(end));
    }
  }

  if (align && shard_size >= 1) {
    const Wide multiple = Wide{shard_size} * *align;
    const std::string multiple_text = "shard size " + std::to_string(shard_size) + " × alignment " +
                                      std::to_string(*align) + " elements";
    const Wide padding = Wide{group.padded_numel} - group.numel;
    if (padding < 0) {
      context.report(path + ".padded_numel", std::to_string(group.padded_numel) +
                                                 " is smaller than numel " +
                                                 std::to_string(group.numel));
    } else if (group.padded_numel % multiple != 0) {
      context.report(path + ".padded_numel",
                     std::to_string(group.padded_numel) + " is not divisible by " + multiple_text);
    } else if (padding >= multiple) {
      context.report(path + ".padded_numel", std::to_string(group.padded_numel) + " pads numel " +
                                                 std::to_string(group.numel) + " by " +
                                                 to_string(padding) + " elements; a multiple of " +
                                                 multiple_text + " needs fewer than " +
                                                 to_string(multiple));
    }
  }
  if (shard_size >= 1 && Wide{group.shard_numel} * shard_size != group.padded_numel) {
    context.report(path + ".shard_numel", std::to_string(group.shard_numel) + " × shard size " +
                                              std::to_string(shard_size) + " is not padded_numel " +
                                              std::to_string(group.padded_numel));
  }
}

void check_buffers(Context& context, const std::string& path,
                   const std::vector<BufferInfo>& buffers) {
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t d = 0; d < buffers[b].shape.size(); ++d) {
      if (buffers[b].shape[d] < 0) {
        context.report(at(at(path, b) + ".shape", d),
                       "negative dimension " + std::to_string(buffers[b].shape[d]));
      }
    }
  }
}

}  // namespace

void check_layout(Context& context) {
  const Plan& plan = context.plan;
  ParamNames names;
  Wide parameters = 0;
  Wide parameter_numel = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const std::string path = at("units", i);
    const Unit& unit = plan.units[i];
    std::optional<Wide> sharded = 0;
    std::optional<Wide> unsharded = 0;
    for (size_t j = 0; j < unit.groups.size(); ++j) {
      const Group& group = unit.groups[j];
      check_group(context, at(path + ".groups", j), group, names);
      const std::optional<int64_t> storage = context.storage_size(group);
      const std::optional<int64_t> compute = context.compute_size(group);
      sharded = sharded && storage
                    ? std::optional<Wide>(*sharded + Wide{group.shard_numel} * *storage)
                    : std::nullopt;
      unsharded = unsharded && compute
                      ? std::optional<Wide>(*unsharded + Wide{group.padded_numel} * *compute)
                      : std::nullopt;
      for (const ParamLayout& param : group.params) {
        parameters += 1;
        parameter_numel += param.numel;
      }
    }
    check_buffers(context, path + ".buffers", unit.buffers);
    if (sharded && *sharded != unit.sharded_bytes) {
      context.report(path + ".sharded_bytes", "is " + std::to_string(unit.sharded_bytes) +
                                                  ", expected " + to_string(*sharded) +
                                                  " (Σ groups shard_numel × dtype size)");
    }
    if (unsharded && *unsharded != unit.unsharded_bytes) {
      context.report(path + ".unsharded_bytes",
                     "is " + std::to_string(unit.unsharded_bytes) + ", expected " +
                         to_string(*unsharded) + " (Σ groups padded_numel × compute dtype size)");
    }
  }
  if (parameters != plan.model.parameters) {
    context.report("model.parameters", "is " + std::to_string(plan.model.parameters) +
                                           ", but the units hold " + to_string(parameters));
  }
  if (parameter_numel != plan.model.parameter_numel) {
    context.report("model.parameter_numel", "is " + std::to_string(plan.model.parameter_numel) +
                                                ", but the units' parameters hold " +
                                                to_string(parameter_numel) + " elements");
  }
}

}  // namespace mfsdp::schema::check
