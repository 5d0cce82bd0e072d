#include "executor/runtime/timeline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

namespace mfsdp::executor {
namespace {

// Compute first, then the streams in the order a reader follows a unit's life.
int track_order(const std::string& track) {
  static const char* const known[] = {"compute", "all_gather", "unified", "reduce_scatter",
                                      "control"};
  for (int i = 0; i < static_cast<int>(std::size(known)); ++i) {
    if (track == known[i]) return i;
  }
  return static_cast<int>(std::size(known));
}

}  // namespace

int64_t Timeline::now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

void Timeline::record(TimelineSpan span) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back(std::move(span));
}

void Timeline::record(std::string track, std::string name, int64_t start_us, int64_t end_us,
                      int64_t bytes) {
  record(TimelineSpan{std::move(track), std::move(name), start_us, end_us, bytes});
}

std::vector<TimelineSpan> Timeline::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(spans_, {});
}

std::string trace_events_json(int rank, const std::vector<TimelineSpan>& spans) {
  std::map<std::string, int> tids;
  for (const auto& s : spans) tids.emplace(s.track, 0);
  std::vector<std::string> tracks;
  for (const auto& [track, unused] : tids) tracks.push_back(track);
  std::stable_sort(tracks.begin(), tracks.end(),
                   [](const auto& a, const auto& b) { return track_order(a) < track_order(b); });
  for (size_t i = 0; i < tracks.size(); ++i) tids[tracks[i]] = static_cast<int>(i);

  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", rank},
                    {"args", {{"sort_index", rank}}}});
  for (const auto& track : tracks) {
    const std::string label = track == "compute" ? "compute" : track + " stream";
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", rank},
                      {"tid", tids[track]},
                      {"args", {{"name", label}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", rank},
                      {"tid", tids[track]},
                      {"args", {{"sort_index", tids[track]}}}});
  }
  for (const auto& s : spans) {
    // The category is the track, so Perfetto can filter compute from each stream.
    nlohmann::json e = {{"ph", "X"},
                        {"cat", s.track},
                        {"name", s.name},
                        {"pid", rank},
                        {"tid", tids[s.track]},
                        {"ts", s.start_us},
                        {"dur", std::max<int64_t>(0, s.end_us - s.start_us)}};
    if (s.bytes >= 0) e["args"] = {{"bytes", s.bytes}};
    events.push_back(std::move(e));
  }
  return events.dump();
}

std::string chrome_trace_json(const std::vector<std::string>& rank_events) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& text : rank_events) {
    for (auto& e : nlohmann::json::parse(text)) all.push_back(std::move(e));
  }
  return nlohmann::json{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}}.dump(1);
}

}  // namespace mfsdp::executor
