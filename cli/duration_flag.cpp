#include "cli/duration_flag.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "schema/error.h"

namespace mfsdp::cli {

std::chrono::milliseconds seconds_flag(double seconds, const std::string& flag, bool zero_allowed) {
  const bool usable = std::isfinite(seconds) && seconds <= kMaxFlagSeconds &&
                      (zero_allowed ? seconds >= 0 : seconds > 0);
  if (!usable) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", seconds);
    fail(ExitCode::kUsage, flag + " must be " + (zero_allowed ? "0 or " : "") +
                               "a positive number of seconds, at most 2592000 (30 days); got " +
                               given);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

}  // namespace mfsdp::cli
