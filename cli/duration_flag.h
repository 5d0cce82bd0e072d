#pragma once
// Duration flags, given in seconds (--collective-timeout, --grace): one check and one message
// for every way a value can be unusable (negative, zero where that is not allowed, NaN,
// infinite, too large for milliseconds), instead of a cast that overflows.

#include <chrono>
#include <string>

namespace mfsdp::cli {

// The longest duration a flag accepts: 30 days.
constexpr double kMaxFlagSeconds = 30 * 24 * 3600;

// `seconds` of flag `flag` as milliseconds. Throws Error(kUsage) naming the flag, the value and
// the range unless it is finite, at most kMaxFlagSeconds, and above 0 (or 0 when
// `zero_allowed`).
std::chrono::milliseconds seconds_flag(double seconds, const std::string& flag, bool zero_allowed);

}  // namespace mfsdp::cli
