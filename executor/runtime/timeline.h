#pragma once
// What ran when, on one rank: spans on named tracks (compute, each stream), for a
// Chrome/Perfetto trace. The compute thread and the stream threads record concurrently.
// Recording is off unless a Timeline is attached, so untraced runs pay one null check.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mfsdp::executor {

struct TimelineSpan {
  std::string track;     // "compute", "all_gather", "reduce_scatter", ...
  std::string name;      // "forward layers.0", "all-gather of layers.1 group 0", ...
  int64_t start_us = 0;  // microseconds since the Unix epoch, so ranks on one host line up
  int64_t end_us = 0;
  int64_t bytes = -1;  // a collective's payload on this rank; -1 when not a collective
};

class Timeline {
 public:
  static int64_t now_us();

  // Spans recorded while disabled are dropped (a run traces a window of its steps).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  void record(TimelineSpan span);
  void record(std::string track, std::string name, int64_t start_us, int64_t end_us,
              int64_t bytes = -1);
  // The spans recorded so far, and forgets them.
  std::vector<TimelineSpan> take();

 private:
  std::atomic<bool> enabled_{true};
  std::mutex mutex_;
  std::vector<TimelineSpan> spans_;
};

// One rank's spans as the JSON text of Chrome trace events (an array), and the whole trace
// (every rank's events, `{"traceEvents": [...]}`) from those texts. Rank r is process r;
// tracks are its threads, compute first.
std::string trace_events_json(int rank, const std::vector<TimelineSpan>& spans);
std::string chrome_trace_json(const std::vector<std::string>& rank_events);

}  // namespace mfsdp::executor
