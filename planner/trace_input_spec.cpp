// `mfsdp plan --trace-input SPEC`: the example input's shape and dtype, checked before the
// model is loaded. No LibTorch here.
#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include "planner/trace_input.h"
#include "schema/checked_int64.h"
#include "schema/error.h"
#include "schema/plan.h"

namespace mfsdp::planner {
namespace {

[[noreturn]] void bad_spec(const std::string& spec, const std::string& what) {
  fail(ExitCode::kUsage, "--trace-input '" + spec + "': " + what +
                             "; expected SHAPE[:DTYPE] such as 2x64:int64 or 8x3x32x32 "
                             "(dimensions >= 1 joined by 'x' or ','; the dtype defaults to "
                             "float32)");
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

const char* trace_device_name(TraceDevice device) {
  return device == TraceDevice::kMeta ? "meta" : "cpu";
}

TraceInput parse_trace_input(const std::string& spec) {
  TraceInput input;
  input.spec = spec;
  const size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    input.dtype = spec.substr(colon + 1);
    const std::vector<std::string>& known = schema::dtype_names();
    if (std::find(known.begin(), known.end(), input.dtype) == known.end()) {
      bad_spec(spec, "unknown dtype '" + input.dtype + "' (mfsdp knows " + joined(known) + ")");
    }
  }
  const std::string shape = spec.substr(0, colon);
  // Bytes so far; none once past what a 64-bit count holds.
  std::optional<int64_t> bytes = schema::dtype_size(input.dtype);
  size_t begin = 0;
  for (int d = 1;; ++d) {
    const size_t end = std::min(shape.find_first_of("x,", begin), shape.size());
    const std::string dim = shape.substr(begin, end - begin);
    const std::string which = "dimension " + std::to_string(d);
    if (dim.empty()) bad_spec(spec, which + " is empty");
    if (dim.find_first_not_of("0123456789") != std::string::npos) {
      bad_spec(spec, which + " '" + dim + "' is not a whole number");
    }
    int64_t size = 0;
    const bool fits = std::from_chars(dim.data(), dim.data() + dim.size(), size).ec == std::errc();
    if (fits && size < 1) bad_spec(spec, which + " is 0; every dimension must be at least 1");
    bytes = fits && bytes ? schema::checked_mul(*bytes, size) : std::nullopt;
    input.shape.push_back(size);
    if (end == shape.size()) break;
    begin = end + 1;
  }
  if (!bytes || *bytes > kMaxTraceInputBytes) {
    fail(ExitCode::kUsage,
         "--trace-input '" + spec + "' is " + (bytes ? std::to_string(*bytes) : "more than 2^63") +
             " bytes; an example input holds at most " + std::to_string(kMaxTraceInputBytes) +
             " bytes (1 GiB), so trace with a smaller batch, e.g. 2x64:int64");
  }
  return input;
}

}  // namespace mfsdp::planner
