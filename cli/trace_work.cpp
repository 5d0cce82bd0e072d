#include "cli/trace_work.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/byte_size.h"

namespace mfsdp::cli {
namespace {

std::string padded(const std::string& text, size_t width, bool left) {
  const std::string fill(width > text.size() ? width - text.size() : 0, ' ');
  return left ? fill + text : text + fill;
}

}  // namespace

std::string format_flops(int64_t flops) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  double value = static_cast<double>(flops);
  size_t prefix = 0;
  while (value >= 1000 && prefix + 1 < std::size(kPrefixes)) {
    value /= 1000;
    ++prefix;
  }
  char text[48];
  if (prefix == 0) {
    std::snprintf(text, sizeof text, "%lld FLOP", static_cast<long long>(flops));
  } else {
    std::snprintf(text, sizeof text, "%.1f %sFLOP", value, kPrefixes[prefix]);
  }
  return text;
}

void write_trace_work(std::ostream& out, const schema::Trace& trace,
                      const std::map<std::string, int64_t>& saved) {
  out << "  shapes only (--trace-device meta): work per unit, no times\n";
  std::vector<std::vector<std::string>> rows = {
      {"unit", "forward", "backward", "moved", "activations"}};
  int64_t total = 0, products = 0;
  const auto add_row = [&](const std::string& unit, const schema::Work& forward,
                           const schema::Work& backward) {
    const auto it = saved.find(unit);
    std::string activations = "-";
    if (it != saved.end()) {
      activations = it->second < 0 ? "-" + format_bytes(-it->second) : format_bytes(it->second);
    }
    const schema::ClassWork f = forward.total(), b = backward.total();
    rows.push_back({unit, format_flops(f.flops), format_flops(b.flops),
                    format_bytes(f.bytes + b.bytes), activations});
    total += f.flops + b.flops;
    products += forward.matmul.flops + backward.matmul.flops + forward.attention.flops +
                backward.attention.flops;
  };
  for (const schema::UnitWork& w : trace.work) {
    schema::Work forward = w.pre_forward;
    forward += w.post_forward;
    add_row(w.unit, forward, w.backward);
  }
  if (trace.loss_work) add_row("(loss)", *trace.loss_work, {});
  const bool with_saved = !saved.empty();
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = "  " + padded(row[0], width[0], false);
    for (size_t c = 1; c < row.size(); ++c) {
      if (c == 4 && !with_saved) break;
      line += "  " + padded(row[c], width[c], true);
    }
    out << line << "\n";
  }
  char share[32];
  std::snprintf(share, sizeof share, "%.1f", total > 0 ? 100.0 * products / total : 0.0);
  out << "  step  " << format_flops(total) << ", " << share
      << " % of it in matmuls and attention\n";
}

}  // namespace mfsdp::cli
