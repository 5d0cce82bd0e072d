// `mfsdp show`'s three renderings of one plan (cli/plan_report.h): the text summary,
// the JSON digest and the Graphviz unit tree. Over 400 lines because the three share their
// walk over the plan's sections and helpers (depths, flags, gathers in flight).
#include "cli/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "cli/trace_work.h"
#include "schema/model_path.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

using nlohmann::ordered_json;

// Long lists (orders of a 100-layer model) wrap at this width under their label.
constexpr size_t kLineWidth = 100;
constexpr size_t kLabelWidth = 17;

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string pad_left(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// "label        a > b > c", wrapped under the first item.
std::string labelled_list(const std::string& label, const std::vector<std::string>& items,
                          const std::string& separator) {
  if (items.empty()) return pad(label, kLabelWidth) + "(none)\n";
  std::string out = pad(label, kLabelWidth);
  size_t column = out.size();
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string piece = i + 1 < items.size() ? items[i] + separator : items[i];
    if (i > 0 && column + piece.size() > kLineWidth) {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      out += "\n" + std::string(kLabelWidth, ' ');
      column = kLabelWidth;
    }
    out += piece;
    column += piece.size();
  }
  return out + "\n";
}

int64_t param_count(const schema::Unit& unit) {
  int64_t count = 0;
  for (const auto& group : unit.groups) count += static_cast<int64_t>(group.params.size());
  return count;
}

// Nesting depth of each unit in the unit tree, 0 for a root. Bounded, so a parent cycle cannot
// hang.
std::vector<int> unit_depths(const schema::Plan& plan) {
  std::map<std::string, size_t> index;
  for (size_t u = 0; u < plan.units.size(); ++u) index.emplace(plan.units[u].name, u);
  std::vector<int> depths;
  for (const auto& unit : plan.units) {
    int depth = 0;
    const schema::Unit* at = &unit;
    while (at->parent && depth < static_cast<int>(plan.units.size())) {
      const auto it = index.find(*at->parent);
      if (it == index.end()) break;
      at = &plan.units[it->second];
      ++depth;
    }
    depths.push_back(depth);
  }
  return depths;
}

std::string entry_unit(const schema::ScheduleEntry& entry) {
  if (!entry.unit) return "";
  return *entry.unit + (entry.call > 0 ? "#" + std::to_string(entry.call) : "");
}

std::string entry_actions(const schema::ScheduleEntry& entry,
                          const std::vector<std::string>& in_flight) {
  std::vector<std::string> actions;
  if (!entry.all_gather.empty()) actions.push_back("gather+ " + join(entry.all_gather, ", "));
  if (!entry.wait.empty()) actions.push_back("wait " + join(entry.wait, ", "));
  if (!entry.reshard.empty()) actions.push_back("reshard " + join(entry.reshard, ", "));
  if (!entry.reduce_scatter.empty()) {
    actions.push_back("reduce-scatter " + join(entry.reduce_scatter, ", "));
  }
  if (!in_flight.empty()) actions.push_back("(in flight: " + join(in_flight, ", ") + ")");
  return join(actions, "  ");
}

void write_header(std::ostream& out, const schema::Plan& plan, const std::string& file) {
  const schema::Policy& policy = plan.policy;
  out << file << " (" << plan.schema << ", " << plan.generator << ")\n";
  // Where the model is from here (model.path is relative to the plan file).
  out << pad("model", kLabelWidth) << schema::locate_model(plan.model.path, file).path << ": "
      << plural(plan.model.modules, "module") << ", " << plural(plan.model.parameters, "parameter")
      << " (" << plural(plan.model.parameter_numel, "element") << ")\n";
  out << pad("mesh", kLabelWidth) << "world " << plan.mesh.world_size << " = shard "
      << plan.mesh.shard_size << " x replicate " << plan.mesh.replicate_size << "\n";
  std::vector<std::string> streams;
  for (const auto& stream : plan.streams) streams.push_back(stream.name);
  out << pad("policy", kLabelWidth) << "param_dtype "
      << (policy.param_dtype ? *policy.param_dtype : "as stored") << ", reduce_dtype "
      << policy.reduce_dtype << ", "
      << (policy.reshard_after_forward ? "reshard after forward" : "kept from forward to backward")
      << ", align " << policy.align_bytes << " B\n";
  out << std::string(kLabelWidth, ' ') << "prefetch " << policy.forward_prefetch << " forward / "
      << policy.backward_prefetch << " backward, resident budget "
      << (policy.resident_budget_bytes > 0 ? format_bytes(policy.resident_budget_bytes) : "none")
      << ", streams " << join(streams, " + ") << "\n";
}

void write_units(std::ostream& out, const schema::Plan& plan) {
  const std::vector<std::string> header = {"name",     "type",  "params", "full",
                                           "per rank", "calls", "flags"};
  const std::vector<int> depths = unit_depths(plan);
  std::vector<std::vector<std::string>> rows;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const schema::Unit& unit = plan.units[u];
    rows.push_back({std::string(2 * depths[u], ' ') + unit.name, short_type_name(unit.type),
                    std::to_string(param_count(unit)), format_bytes(unit.unsharded_bytes),
                    format_bytes(unit.sharded_bytes), std::to_string(unit.call_count),
                    join(unit_flags(unit), " ")});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  // Text columns align left, numbers right.
  const auto write_row = [&](const std::vector<std::string>& row) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      const bool numeric = c >= 2 && c <= 5;
      line += (c ? "  " : "") + (numeric ? pad_left(row[c], width[c]) : pad(row[c], width[c]));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  out << "\n"
      << pad("units", kLabelWidth) << plan.units.size()
      << " in definition order (full: gathered bytes; per rank: sharded bytes)\n";
  write_row(header);
  for (const auto& row : rows) write_row(row);
  out << labelled_list("roots", plan.roots, ", ");
  out << labelled_list("forward", plan.forward_order, " > ");
  out << labelled_list("backward", plan.backward_order, " > ");
}

void write_schedule(std::ostream& out, const schema::Plan& plan) {
  const auto in_flight = gathers_in_flight(plan);
  size_t point_width = 0, unit_width = 0, live_width = 0;
  for (const auto& entry : plan.schedule) {
    point_width = std::max(point_width, entry.point.size());
    unit_width = std::max(unit_width, entry_unit(entry).size());
    live_width = std::max(live_width, format_bytes(entry.unsharded_bytes).size());
  }
  const size_t n = plan.schedule.size();
  out << "\n"
      << pad("schedule", kLabelWidth) << n << (n == 1 ? " entry" : " entries")
      << " of one microbatch (live: gathered bytes at the entry)\n";
  for (size_t i = 0; i < plan.schedule.size(); ++i) {
    const auto& entry = plan.schedule[i];
    std::string line = "  " + pad(entry.point, point_width) + "  " +
                       pad(entry_unit(entry), unit_width) + "  live " +
                       pad_left(format_bytes(entry.unsharded_bytes), live_width);
    const std::string actions = entry_actions(entry, in_flight[i]);
    if (!actions.empty()) line += "  " + actions;
    out << line << "\n";
  }
}

// "  name         value": an item under a section heading, its value in the heading's column.
std::string item(const std::string& name) {
  return "  " + pad(name, kLabelWidth - 2);
}

void write_memory_and_communication(std::ostream& out, const schema::Plan& plan) {
  const schema::Memory& memory = plan.memory;
  out << "\n" << pad("memory", kLabelWidth) << "per rank\n";
  out << item("sharded") << "params " << format_bytes(memory.sharded_param_bytes) << ", grads "
      << format_bytes(memory.sharded_grad_bytes) << " (" << plan.policy.reduce_dtype << ")\n";
  out << item("peak") << format_bytes(memory.peak_unsharded_bytes) << " gathered at "
      << memory.peak_at;
  if (plan.policy.resident_budget_bytes > 0) {
    out << " (budget " << format_bytes(plan.policy.resident_budget_bytes) << ")";
  }
  out << "\n";
  out << item("slots") << memory.slots.size()
      << ", allocated once: " << format_bytes(memory.slot_bytes) << "\n";
  size_t bytes_width = 0;
  for (const auto& slot : memory.slots) {
    bytes_width = std::max(bytes_width, format_bytes(slot.bytes).size());
  }
  for (const auto& slot : memory.slots) {
    out << "    " << pad("slot " + std::to_string(slot.index), kLabelWidth - 4)
        << pad_left(format_bytes(slot.bytes), bytes_width) << "  " << join(slot.units, ", ")
        << "\n";
  }
  if (const auto& a = memory.activations) {
    out << item("activations") << format_bytes(a->peak_bytes) << " at " << a->peak_at
        << ", microbatch of " << plural(a->microbatch, "sample") << " (" << a->loss << " loss)\n";
    out << item("with params") << format_bytes(a->combined_peak_bytes)
        << ": that peak + sharded params and grads + slots (no optimizer state)\n";
  } else {
    out << item("activations") << "unknown: plan with --trace-input to measure them\n";
  }

  const schema::Communication& comm = plan.communication;
  out << "\n" << pad("communication", kLabelWidth) << "per rank, one microbatch\n";
  out << item("all-gather") << format_bytes(comm.all_gather_bytes) << " in "
      << plural(comm.all_gather_count, "call") << "\n";
  out << item("reduce-scatter") << format_bytes(comm.reduce_scatter_bytes) << " in "
      << plural(comm.reduce_scatter_count, "call") << "\n";
  if (plan.mesh.replicate_size > 1) {
    out << item("all-reduce") << format_bytes(comm.all_reduce_bytes) << " across "
        << plan.mesh.replicate_size << " replicas, once per optimizer step\n";
  }
}

void write_diagnostics(std::ostream& out, const schema::Plan& plan) {
  out << "\n" << pad("diagnostics", kLabelWidth) << plan.diagnostics.size() << "\n";
  for (const auto& d : plan.diagnostics) {
    out << "  " << d.severity << " " << d.code << (d.where.empty() ? "" : " [" + d.where + "]")
        << ": " << d.message << "\n";
  }
}

std::string milliseconds_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", ms);
  return text;
}

// Only plans made with --trace-input have this section.
void write_trace(std::ostream& out, const schema::Plan& plan) {
  if (!plan.trace) return;
  const schema::Trace& trace = *plan.trace;
  out << "\n"
      << pad("trace", kLabelWidth) << "inputs " << join(trace.inputs, ", ") << "; "
      << (trace.differs_from_static.empty()
              ? "same calls and orders as the static estimate"
              : "differs from the static estimate in " + join(trace.differs_from_static, ", "))
      << "\n";
  // Each unit's activations beside its times, when the plan measured them.
  std::map<std::string, int64_t> saved;
  if (const auto& a = plan.memory.activations) {
    for (const auto& unit : a->units) saved[unit.unit] = unit.saved_bytes;
  }
  const auto saved_text = [&saved](const std::string& unit) {
    const auto it = saved.find(unit);
    if (it == saved.end()) return std::string("-");
    return it->second < 0 ? "-" + format_bytes(-it->second) : format_bytes(it->second);
  };
  if (trace.device) return write_trace_work(out, trace, saved);
  size_t unit_width = 4, forward_width = 7, backward_width = 8, saved_width = 11;
  for (const auto& time : trace.times) {
    unit_width = std::max(unit_width, time.unit.size());
    forward_width = std::max(forward_width, milliseconds_text(time.forward_ms).size());
    backward_width = std::max(backward_width, milliseconds_text(time.backward_ms).size());
    saved_width = std::max(saved_width, saved_text(time.unit).size());
  }
  out << "  " << pad("unit", unit_width) << "  " << pad_left("forward", forward_width) << "  "
      << pad_left("backward", backward_width);
  if (!saved.empty()) out << "  " << pad_left("activations", saved_width);
  out << "\n";
  for (const auto& time : trace.times) {
    out << "  " << pad(time.unit, unit_width) << "  "
        << pad_left(milliseconds_text(time.forward_ms), forward_width) << "  "
        << pad_left(milliseconds_text(time.backward_ms), backward_width);
    if (!saved.empty()) out << "  " << pad_left(saved_text(time.unit), saved_width);
    out << "\n";
  }
}

// Text inside a DOT quoted string: '"' and '\\' escaped, line breaks flattened.
std::string dot_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string dot_quoted(const std::string& text) {
  return "\"" + dot_escaped(text) + "\"";
}

}  // namespace

std::string short_type_name(const std::string& type) {
  return type.substr(type.rfind('.') == std::string::npos ? 0 : type.rfind('.') + 1);
}

std::vector<std::string> unit_flags(const schema::Unit& unit) {
  std::vector<std::string> flags;
  if (unit.root) flags.push_back("root");
  if (unit.kept_after_forward) flags.push_back("kept");
  if (unit.checkpoint) flags.push_back("checkpoint");
  if (unit.conditional) flags.push_back("conditional");
  if (unit.repeated) flags.push_back("repeated");
  const bool frozen = std::any_of(unit.groups.begin(), unit.groups.end(),
                                  [](const schema::Group& g) { return !g.requires_grad; });
  if (frozen) flags.push_back("frozen");
  return flags;
}

std::vector<std::vector<std::string>> gathers_in_flight(const schema::Plan& plan) {
  std::vector<std::vector<std::string>> result;
  std::vector<std::string> issued;
  for (const auto& entry : plan.schedule) {
    for (const auto& unit : entry.all_gather) issued.push_back(unit);
    for (const auto& unit : entry.wait) {
      issued.erase(std::remove(issued.begin(), issued.end(), unit), issued.end());
    }
    result.push_back(issued);
  }
  return result;
}

// Only plans made with --profile have this section.
void write_prediction(std::ostream& out, const schema::Plan& plan) {
  if (!plan.prediction) return;
  const schema::StepPrediction& p = *plan.prediction;
  char text[256];
  std::snprintf(text, sizeof text,
                "step %.2f ms = compute %.2f + exposed communication %.2f + contention %.2f ms",
                p.step_ms, p.compute_ms, p.exposed_comm_ms, p.contention_ms);
  out << "\n"
      << pad("prediction", kLabelWidth) << text << "\n"
      << pad("", kLabelWidth) << "on profile '" << p.profile << "', " << p.microbatches
      << " microbatch" << (p.microbatches == 1 ? "" : "es") << " of " << p.microbatch_samples
      << " per rank, " << p.optimizer
      << (p.memory_bytes ? ", " + format_bytes(*p.memory_bytes) + " per rank" : std::string())
      << " (mfsdp show --predict for the timeline)\n";
}

// Only plans made with --training (or a scope file's training) have this section.
void write_training(std::ostream& out, const schema::Plan& plan) {
  if (!plan.training) return;
  out << "\n"
      << pad("training", kLabelWidth) << schema::training_to_json(*plan.training).dump()
      << " (defaults for mfsdp run; its flags win)\n";
}

std::string render_plan_text(const schema::Plan& plan, const std::string& file) {
  std::ostringstream out;
  write_header(out, plan, file);
  write_units(out, plan);
  write_schedule(out, plan);
  write_memory_and_communication(out, plan);
  write_diagnostics(out, plan);
  write_trace(out, plan);
  write_prediction(out, plan);
  write_training(out, plan);
  return out.str();
}

ordered_json plan_report_json(const schema::Plan& plan, const std::string& file) {
  const ordered_json whole = schema::plan_to_json(plan);
  ordered_json report;
  report["file"] = file;
  report["schema"] = plan.schema;
  report["generator"] = plan.generator;
  report["model"] = whole["model"];
  report["mesh"] = whole["mesh"];
  report["policy"] = whole["policy"];
  report["units"] = ordered_json::array();
  const std::vector<int> depths = unit_depths(plan);
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const schema::Unit& unit = plan.units[u];
    report["units"].push_back({{"name", unit.name},
                               {"type", unit.type},
                               {"class", short_type_name(unit.type)},
                               {"parent", unit.parent ? ordered_json(*unit.parent) : nullptr},
                               {"depth", depths[u]},
                               {"param_count", param_count(unit)},
                               {"unsharded_bytes", unit.unsharded_bytes},
                               {"sharded_bytes", unit.sharded_bytes},
                               {"call_count", unit.call_count},
                               {"flags", unit_flags(unit)}});
  }
  report["roots"] = plan.roots;
  report["forward_order"] = plan.forward_order;
  report["backward_order"] = plan.backward_order;
  const auto in_flight = gathers_in_flight(plan);
  report["schedule"] = ordered_json::array();
  for (size_t i = 0; i < plan.schedule.size(); ++i) {
    const auto& entry = plan.schedule[i];
    report["schedule"].push_back({{"point", entry.point},
                                  {"unit", entry.unit ? ordered_json(*entry.unit) : nullptr},
                                  {"call", entry.call},
                                  {"all_gather", entry.all_gather},
                                  {"wait", entry.wait},
                                  {"reshard", entry.reshard},
                                  {"reduce_scatter", entry.reduce_scatter},
                                  {"in_flight", in_flight[i]},
                                  {"unsharded_bytes", entry.unsharded_bytes}});
  }
  report["memory"] = whole["memory"];
  report["communication"] = whole["communication"];
  ordered_json diagnostics = {{"info", 0}, {"warning", 0}, {"error", 0}};
  for (const auto& d : plan.diagnostics) {
    if (diagnostics.contains(d.severity)) {
      diagnostics[d.severity] = diagnostics[d.severity].get<int>() + 1;
    }
  }
  diagnostics["items"] = whole["diagnostics"];
  report["diagnostics"] = diagnostics;
  if (plan.trace) report["trace"] = whole["trace"];
  if (plan.prediction) report["prediction"] = whole["prediction"];
  if (plan.training) report["training"] = whole["training"];
  return report;
}

std::string render_plan_dot(const schema::Plan& plan, const std::string& file) {
  std::ostringstream out;
  out << "digraph plan {\n";
  out << "  // " << file << ": unit tree (solid, parent -> unit), forward order (dashed)\n";
  out << "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n";
  for (const auto& unit : plan.units) {
    std::vector<std::string> lines = {
        unit.name, short_type_name(unit.type) + ", " + plural(param_count(unit), "param"),
        format_bytes(unit.unsharded_bytes) + " full, " + format_bytes(unit.sharded_bytes) +
            " per rank"};
    const auto flags = unit_flags(unit);
    if (!flags.empty()) lines.push_back(join(flags, " "));
    for (auto& line : lines) line = dot_escaped(line);
    out << "  " << dot_quoted(unit.name) << " [label=\"" << join(lines, "\\n") << "\""
        << (unit.call_count == 0 ? ", style=dotted" : "") << "];\n";
  }
  for (const auto& unit : plan.units) {
    if (unit.parent)
      out << "  " << dot_quoted(*unit.parent) << " -> " << dot_quoted(unit.name) << ";\n";
  }
  for (size_t i = 1; i < plan.forward_order.size(); ++i) {
    out << "  " << dot_quoted(plan.forward_order[i - 1]) << " -> "
        << dot_quoted(plan.forward_order[i])
        << " [style=dashed, color=gray40, constraint=false];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace mfsdp::cli
