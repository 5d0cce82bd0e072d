#include "predict/run_measurement.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/json_text.h"

namespace mfsdp::predict {
namespace {

using nlohmann::json;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ExitCode::kUsage, std::string(what) + " " + path + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Measured read_run_metrics(const std::string& path) {
  const std::string text = read_file(path, "--metrics");
  std::map<int64_t, double> slowest;               // by step
  std::map<int64_t, std::vector<double>> exposed;  // by step
  std::map<int64_t, bool> ranks;
  std::istringstream lines(text);
  std::string line;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    const std::string error = schema::parse_json_text(line, j);
    if (!error.empty()) {
      fail(ExitCode::kUsage,
           path + ":" + std::to_string(number) + ": not a metrics line: " + error);
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("rank") && j["rank"].is_number_integer()) ranks[j["rank"].get<int64_t>()] = true;
    if (j.contains("step_ms") && j["step_ms"].is_number()) {
      slowest[step] = std::max(slowest[step], j["step_ms"].get<double>());
    }
    if (j.contains("exposed_comm_ms") && j["exposed_comm_ms"].is_number()) {
      exposed[step].push_back(j["exposed_comm_ms"].get<double>());
    }
  }
  if (slowest.empty()) {
    fail(ExitCode::kUsage, path +
                               ": no step lines with step_ms; give the file a run's --metrics "
                               "wrote (docs/run.md#metrics)");
  }
  const int64_t first = slowest.begin()->first;
  std::vector<double> steps, waits;
  for (const auto& [step, time] : slowest) {
    if (step == first && slowest.size() > 1) continue;  // the first step warms up
    steps.push_back(time);
    for (double e : exposed[step]) waits.push_back(e);
  }
  Measured m;
  m.step_ms = median(steps);
  if (!waits.empty()) m.exposed_comm_ms = median(waits);
  m.steps = static_cast<int64_t>(steps.size());
  m.ranks = static_cast<int64_t>(ranks.size());
  return m;
}

void read_run_trace(const std::string& path, Measured& into) {
  json doc;
  const std::string error = schema::parse_json_text(read_file(path, "--run-trace"), doc);
  if (!error.empty()) fail(ExitCode::kUsage, path + ": not valid JSON: " + error);
  const json& events = doc.is_object() && doc.contains("traceEvents") ? doc["traceEvents"] : doc;
  if (!events.is_array()) {
    fail(ExitCode::kUsage, path +
                               ": not a Chrome trace (no traceEvents); give the file a run's "
                               "--trace wrote (docs/run.md)");
  }
  std::map<int64_t, int64_t> steps;  // by rank (pid)
  std::map<std::string, UnitFigures> sums;
  const auto starts = [](const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
  };
  for (const json& e : events) {
    // Spans only, with the fields a run's trace gives them; anything else is not ours.
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X" || !e.contains("dur") ||
        !e["dur"].is_number() || !e.contains("name") || !e["name"].is_string()) {
      continue;
    }
    const std::string name = e["name"].get<std::string>();
    const double d = e["dur"].get<double>() / 1000;
    const int64_t pid =
        e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int64_t>() : 0;
    if (starts(name, "step ")) ++steps[pid];
    if (starts(name, "forward ")) sums[name.substr(8)].forward_ms += d;
    if (starts(name, "backward ")) sums[name.substr(9)].backward_ms += d;
    if (starts(name, "wait for all-gather of ")) sums[name.substr(23)].wait_ms += d;
  }
  int64_t rank_steps = 0;
  for (const auto& [rank, n] : steps) rank_steps += n;
  if (rank_steps == 0) {
    fail(ExitCode::kUsage, path + ": no `step` spans; give the file a run's --trace wrote");
  }
  for (auto& [unit, f] : sums) {
    f.forward_ms /= static_cast<double>(rank_steps);
    f.backward_ms /= static_cast<double>(rank_steps);
    f.wait_ms /= static_cast<double>(rank_steps);
  }
  into.units = sums;
  into.traced_steps = rank_steps / static_cast<int64_t>(steps.size());
}

}  // namespace mfsdp::predict
