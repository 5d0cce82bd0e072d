#include "executor/train/progress.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "executor/train/trainer.h"

namespace mfsdp::executor {
namespace {

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  std::ostringstream out;
  if (s >= 3600)
    out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << s % 3600 / 60 << "m";
  else if (s >= 60)
    out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else
    out << s << "s";
  return out.str();
}

}  // namespace

void Progress::step(int64_t step, double lr, const StepRecord& r, double mean_ms) {
  const int64_t done = step + 1;
  std::ostringstream line;
  line << "step " << std::setw(digits()) << done << "/" << config_.steps << "  loss " << std::fixed
       << std::setprecision(4) << r.loss << "  lr " << std::scientific << std::setprecision(2) << lr
       << std::fixed << std::setprecision(1) << "  " << r.ms << " ms/step  " << std::setprecision(0)
       << samples_ / (mean_ms / 1000.0) << " samples/s";
  if (r.grad_norm) line << "  grad norm " << std::setprecision(3) << *r.grad_norm;
  line << "  ETA " << duration_text((config_.steps - done) * mean_ms / 1000.0);
  const bool logged =
      done % std::max<int64_t>(config_.log_every, 1) == 0 || done == config_.steps || done == 1;
  if (logged) {
    out_ << (config_.live_progress ? "\r\033[K" : "") << line.str() << std::endl;
  } else if (config_.live_progress) {
    out_ << "\r\033[K" << line.str() << '\r' << std::flush;
  }
}

int Progress::digits() const {
  return static_cast<int>(std::to_string(config_.steps).size());
}

}  // namespace mfsdp::executor
