#include "cli/whole_number.h"

#include <charconv>

#include "schema/error.h"

namespace mfsdp::cli {

int64_t whole_number(const std::string& text, const std::string& flag, int64_t min, int64_t max,
                     const std::string& range) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::invalid_argument || stop != end) {
    fail(ExitCode::kUsage, flag + " '" + text + "' is not a whole number; it must be " + range);
  }
  if (error == std::errc::result_out_of_range || value < min || value > max) {
    fail(ExitCode::kUsage, flag + " " + text + " is invalid; it must be " + range);
  }
  return value;
}

}  // namespace mfsdp::cli
