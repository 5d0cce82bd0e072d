#include "executor/train/first_batch.h"

#include <sstream>
#include <vector>

#include "planner/torchscript/torch_model.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") + 1 - begin);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t d = 0; d < t.dim(); ++d) out << (d ? ", " : "") << t.size(d);
  out << "]";
  return out.str();
}

}  // namespace

std::string interpreter_reason(const std::string& what) {
  // The interpreter ends with the Python-style exception line, e.g. "RuntimeError: ...".
  const std::vector<std::string> lines = lines_of(what);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t colon = it->find("Error: ");
    if (colon != std::string::npos && it->find(' ') > colon) return trimmed(it->substr(colon + 7));
  }
  for (const std::string& line : lines) {
    if (!trimmed(line).empty()) return trimmed(line);
  }
  return "";
}

std::string interpreter_source_line(const std::string& what) {
  // Prefer the model's own source ("original code"); its first marked line is the model's.
  const std::vector<std::string> lines = lines_of(what);
  size_t from = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("original code") != std::string::npos) from = i;
  }
  for (size_t i = from + 1; i + 1 < lines.size(); ++i) {
    if (lines[i + 1].find("<--- HERE") != std::string::npos) return trimmed(lines[i]);
  }
  return "";
}

void fail_on_first_batch(const std::exception& error, const torch::jit::Module& model,
                         const at::Tensor& input, bool verbose) {
  const std::string what = error.what();
  const std::string reason = interpreter_reason(what);
  std::ostringstream out;
  out << "the model failed on the first batch: " << (reason.empty() ? "(no reason given)" : reason);
  const std::string where = interpreter_source_line(what);
  if (!where.empty()) out << ", at `" << where << "`";
  if (reason.find("index out of range") != std::string::npos) {
    std::string tables;
    for (const auto& m : model.named_modules()) {
      const auto type = m.value.type()->name();
      if (!type || type->name() != "Embedding" || !m.value.hasattr("num_embeddings")) continue;
      tables += (tables.empty() ? "" : ", ") + m.name + " " +
                std::to_string(m.value.attr("num_embeddings").toInt()) + " rows";
    }
    if (!tables.empty()) out << " (the model's embeddings: " << tables << ")";
  }
  if (input.defined()) {
    out << "; the batch is " << planner::dtype_name_of(input.scalar_type(), "the batch") << " "
        << shape_text(input);
    if (input.numel() > 0 && !at::isFloatingType(input.scalar_type())) {
      out << " with ids " << input.min().item<int64_t>() << ".." << input.max().item<int64_t>();
    }
  }
  out << "; check --seq-len or --input-shape, --input-dtype, the data's token ids and --loss "
         "against the model";
  if (verbose) {
    out << "\n" << what;
  } else {
    out << " (--verbose shows the model's traceback)";
  }
  fail(ExitCode::kUsage, out.str());
}

}  // namespace mfsdp::executor
