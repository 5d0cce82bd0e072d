#include "executor/train/memory_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace mfsdp::executor {

int64_t MemoryBreakdown::transient() const {
  return std::max(activation_peak, optimizer_step_peak);
}

int64_t MemoryBreakdown::accounted() const {
  return runtime_base + sharded_params + main_grads + optimizer_state + slots + transient() +
         cache + code + heap_objects;
}

int64_t MemoryBreakdown::other() const {
  return peak_rss - accounted();
}

int64_t MemoryBreakdown::process_peak_rss() const {
  return std::max(setup_peak_rss, peak_rss);
}

nlohmann::json MemoryBreakdown::to_json() const {
  nlohmann::json j = {{"rank", rank},
                      {"device", device},
                      {"runtime_base_bytes", runtime_base},
                      {"model_as_loaded_bytes", model_as_loaded},
                      {"setup_peak_rss_bytes", setup_peak_rss},
                      {"sharded_param_bytes", sharded_params},
                      {"main_grad_bytes", main_grads},
                      {"optimizer_state_bytes", optimizer_state},
                      {"slot_bytes", slots},
                      {"activation_peak_bytes", activation_peak},
                      {"optimizer_step_peak_bytes", optimizer_step_peak},
                      {"code_bytes", code},
                      {"cache_bytes", cache},
                      {"heap_object_bytes", heap_objects},
                      {"peak_rss_bytes", peak_rss}};
  if (device == "cpu") j["other_bytes"] = other();
  return j;
}

MemoryBreakdown MemoryBreakdown::from_json(const nlohmann::json& j) {
  MemoryBreakdown m;
  m.rank = j.at("rank").get<int>();
  m.device = j.at("device").get<std::string>();
  m.runtime_base = j.at("runtime_base_bytes").get<int64_t>();
  m.model_as_loaded = j.at("model_as_loaded_bytes").get<int64_t>();
  m.setup_peak_rss = j.at("setup_peak_rss_bytes").get<int64_t>();
  m.sharded_params = j.at("sharded_param_bytes").get<int64_t>();
  m.main_grads = j.at("main_grad_bytes").get<int64_t>();
  m.optimizer_state = j.at("optimizer_state_bytes").get<int64_t>();
  m.slots = j.at("slot_bytes").get<int64_t>();
  m.activation_peak = j.at("activation_peak_bytes").get<int64_t>();
  m.optimizer_step_peak = j.at("optimizer_step_peak_bytes").get<int64_t>();
  m.code = j.at("code_bytes").get<int64_t>();
  m.cache = j.value("cache_bytes", int64_t{0});
  m.heap_objects = j.value("heap_object_bytes", int64_t{0});
  m.peak_rss = j.at("peak_rss_bytes").get<int64_t>();
  return m;
}

namespace {

std::string gpu_memory_table(const std::vector<MemoryBreakdown>& ranks) {
  const char* headers[] = {"params", "grads", "optimizer", "slots", "activations", "host RSS"};
  std::ostringstream out;
  out << "GPU memory per rank, MiB (docs/run.md#memory):\n" << std::setw(8) << "";
  for (const char* h : headers) out << std::setw(12) << h;
  out << "\n" << std::fixed << std::setprecision(1);
  for (const MemoryBreakdown& m : ranks) {
    out << "rank " << std::setw(3) << std::left << m.rank << std::right;
    for (int64_t v : {m.sharded_params, m.main_grads, m.optimizer_state, m.slots, m.activation_peak,
                      m.process_peak_rss()}) {
      out << std::setw(12) << v / (1024.0 * 1024.0);
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace

std::string memory_table(const std::vector<MemoryBreakdown>& ranks) {
  if (!ranks.empty() && ranks.front().device != "cpu") return gpu_memory_table(ranks);
  const char* headers[] = {"base",       "params", "grads", "optimizer", "slots", "activations",
                           "optim step", "cache",  "code",  "objects",   "other", "peak RSS"};
  std::ostringstream out;
  out << "memory per rank, MiB (docs/run.md#memory):\n" << std::setw(8) << "";
  for (const char* h : headers) out << std::setw(12) << h;
  out << "   other/(peak-base)  set-up peak  model as loaded\n";
  auto mib = [](int64_t bytes) { return bytes / (1024.0 * 1024.0); };
  out << std::fixed << std::setprecision(1);
  for (const MemoryBreakdown& m : ranks) {
    out << "rank " << std::setw(3) << std::left << m.rank << std::right;
    for (int64_t v : {m.runtime_base, m.sharded_params, m.main_grads, m.optimizer_state, m.slots,
                      m.activation_peak, m.optimizer_step_peak, m.cache, m.code, m.heap_objects,
                      m.other(), m.peak_rss}) {
      out << std::setw(12) << mib(v);
    }
    const int64_t above_base = m.peak_rss - m.runtime_base;
    out << std::setw(19) << (above_base > 0 ? 100.0 * m.other() / above_base : 0.0) << " %"
        << std::setw(13) << mib(m.setup_peak_rss) << std::setw(17) << mib(m.model_as_loaded)
        << "\n";
  }
  return out.str();
}

}  // namespace mfsdp::executor
