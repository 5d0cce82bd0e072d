#pragma once
// Whole-number flags, read as typed and checked here: CLI11 clamps a value beyond 64 bits to
// the type's limit without a word, and takes "1.5" or "-1" for some types.

#include <cstdint>
#include <string>

namespace mfsdp::cli {

// `text` of whole-number flag `flag`, which must lie in [min, max] (`range` says so in words,
// e.g. "from 1 to 65535"). Throws Error(kUsage) naming the flag, the text and the range when
// `text` is not a decimal integer or lies outside it.
int64_t whole_number(const std::string& text, const std::string& flag, int64_t min, int64_t max,
                     const std::string& range);

}  // namespace mfsdp::cli
