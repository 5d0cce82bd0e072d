#include "cli/byte_size.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <limits>

#include "schema/error.h"

namespace mfsdp::cli {

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  }
  return text;
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  const struct {
    const char* name;
    int64_t scale;
  } scales[] = {{"", 1},
                {"B", 1},
                {"KiB", int64_t{1} << 10},
                {"MiB", int64_t{1} << 20},
                {"GiB", int64_t{1} << 30},
                {"TiB", int64_t{1} << 40},
                {"KB", 1000},
                {"MB", 1000 * 1000},
                {"GB", 1000 * 1000 * 1000},
                {"TB", int64_t{1000} * 1000 * 1000 * 1000}};
  const auto scale = std::find_if(std::begin(scales), std::end(scales),
                                  [&](const auto& s) { return unit == s.name; });
  if (digits == 0 || scale == std::end(scales)) {
    fail(ExitCode::kUsage,
         flag + " '" + text + "' is not a byte size; write e.g. 512MiB, 2GiB, 1GB or 1048576");
  }
  int64_t number = 0;
  const bool fits = std::from_chars(text.data(), text.data() + digits, number).ec == std::errc() &&
                    number <= std::numeric_limits<int64_t>::max() / scale->scale;
  if (!fits) {
    fail(ExitCode::kUsage, flag + " '" + text + "' is too large; a byte size is at most " +
                               std::to_string(std::numeric_limits<int64_t>::max()) +
                               " bytes (8 EiB)");
  }
  return number * scale->scale;
}

}  // namespace mfsdp::cli
