#include "cli/plan_summary.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

std::vector<std::string> checkpointed_units(const schema::Plan& plan) {
  std::vector<std::string> names;
  for (const auto& unit : plan.units) {
    if (unit.checkpoint) names.push_back(unit.name);
  }
  return names;
}

}  // namespace

void print_summary(const schema::Plan& plan, const std::string& model, const std::string& output) {
  auto& err = std::cerr;
  auto join = [](const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i == 16 && items.size() > 20) {
        out += std::string(sep) + "... (" + std::to_string(items.size() - 16) + " more)";
        break;
      }
      out += (i ? sep : "") + items[i];
    }
    return out;
  };
  err << "mfsdp plan: " << model << " -> " << output << "\n";
  err << "  mesh         world " << plan.mesh.world_size << " = shard " << plan.mesh.shard_size
      << " x replicate " << plan.mesh.replicate_size << "\n";
  err << "  units        " << plan.units.size() << " (roots: " << join(plan.roots, ", ") << ")\n";
  const std::vector<std::string> checkpointed = checkpointed_units(plan);
  if (!checkpointed.empty()) {
    err << "  checkpoint   " << join(checkpointed, ", ") << " (recomputed in backward)\n";
  }
  err << "  forward      " << join(plan.forward_order, " > ") << "\n";
  err << "  backward     " << join(plan.backward_order, " > ") << "\n";
  if (plan.trace) {
    const auto& differs = plan.trace->differs_from_static;
    err << "  trace        " << join(plan.trace->inputs, ", ") << " ("
        << (differs.empty() ? "same calls and orders as the static estimate"
                            : "differs from the static estimate in " + join(differs, ", "))
        << ")\n";
  }
  if (plan.training) {
    err << "  training     " << schema::training_to_json(*plan.training).dump() << "\n";
  }
  err << "  per rank     params " << format_bytes(plan.memory.sharded_param_bytes) << ", grads "
      << format_bytes(plan.memory.sharded_grad_bytes) << " (sharded)\n";
  err << "  peak         " << format_bytes(plan.memory.peak_unsharded_bytes) << " unsharded at "
      << plan.memory.peak_at << "; " << plan.memory.slots.size()
      << (plan.memory.slots.size() == 1 ? " slot, " : " slots, ")
      << format_bytes(plan.memory.slot_bytes) << "\n";
  if (const auto& a = plan.memory.activations) {
    err << "  activations  " << format_bytes(a->peak_bytes) << " at " << a->peak_at << " for "
        << a->microbatch << (a->microbatch == 1 ? " sample; " : " samples; ")
        << format_bytes(a->combined_peak_bytes) << " with params, grads and slots\n";
  }
  err << "  microbatch   all-gather " << format_bytes(plan.communication.all_gather_bytes) << " ("
      << plan.communication.all_gather_count << "), reduce-scatter "
      << format_bytes(plan.communication.reduce_scatter_bytes) << " ("
      << plan.communication.reduce_scatter_count << ")\n";
  // Errors and warnings first, each severity in plan order, so that many infos cannot hide
  // the one warning that explains a plan.
  std::vector<const schema::Diagnostic*> ordered;
  std::map<std::string, size_t> count;
  for (const char* severity : {"error", "warning", "info"}) {
    for (const auto& d : plan.diagnostics) {
      if (d.severity == severity) ordered.push_back(&d);
    }
  }
  for (const auto& d : plan.diagnostics) {
    ++count[d.severity];
    if (d.severity != "error" && d.severity != "warning" && d.severity != "info") {
      ordered.push_back(&d);
    }
  }
  err << "  diagnostics  " << plan.diagnostics.size();
  std::string counts;
  for (const char* severity : {"error", "warning", "info"}) {
    const size_t n = count[severity];
    if (n == 0) continue;
    counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + severity +
              (n == 1 || std::string(severity) == "info" ? "" : "s");
  }
  if (count["error"] + count["warning"] > 0) err << " (" << counts << ")";
  err << "\n";
  const size_t shown = std::min<size_t>(ordered.size(), 20);
  for (size_t i = 0; i < shown; ++i) {
    const auto& d = *ordered[i];
    err << "    " << d.severity << " " << d.code << ": " << d.message << "\n";
  }
  if (shown < ordered.size()) {
    err << "    ... " << ordered.size() - shown << " more in the plan's diagnostics\n";
  }
}

void print_json_summary(const schema::Plan& plan, const std::string& output) {
  nlohmann::ordered_json s;
  s["output"] = output;
  s["units"] = plan.units.size();
  s["roots"] = plan.roots;
  s["forward_order"] = plan.forward_order;
  s["backward_order"] = plan.backward_order;
  const std::vector<std::string> checkpointed = checkpointed_units(plan);
  if (!checkpointed.empty()) s["checkpointed"] = checkpointed;
  s["sharded_param_bytes"] = plan.memory.sharded_param_bytes;
  s["sharded_grad_bytes"] = plan.memory.sharded_grad_bytes;
  s["peak_unsharded_bytes"] = plan.memory.peak_unsharded_bytes;
  s["peak_at"] = plan.memory.peak_at;
  s["slot_bytes"] = plan.memory.slot_bytes;
  s["all_gather_bytes"] = plan.communication.all_gather_bytes;
  s["reduce_scatter_bytes"] = plan.communication.reduce_scatter_bytes;
  nlohmann::ordered_json counts = {{"info", 0}, {"warning", 0}, {"error", 0}};
  for (const auto& d : plan.diagnostics) counts[d.severity] = counts[d.severity].get<int>() + 1;
  s["diagnostics"] = counts;
  if (const auto& a = plan.memory.activations) {
    s["activation_peak_bytes"] = a->peak_bytes;
    s["activation_microbatch"] = a->microbatch;
  }
  if (plan.trace) {
    s["trace"] = {{"inputs", plan.trace->inputs},
                  {"differs_from_static", plan.trace->differs_from_static}};
  }
  std::cout << s.dump(2) << "\n";
}

}  // namespace mfsdp::cli
