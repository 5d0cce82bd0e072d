#pragma once
// `mfsdp show`'s table of a shape-only trace (device "meta"): each unit's FLOPs and bytes
// moved, forward and backward, beside its activations, in place of the times it has none of.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "schema/plan.h"

namespace mfsdp::cli {

// FLOPs with an SI prefix, e.g. "58.7 MFLOP".
std::string format_flops(int64_t flops);

// `saved`: each unit's saved activation bytes (none: the column is left out).
void write_trace_work(std::ostream& out, const schema::Trace& trace,
                      const std::map<std::string, int64_t>& saved);

}  // namespace mfsdp::cli
