#pragma once
// The first microbatch is the first time the model meets the data: an error the TorchScript
// interpreter raises there is almost always the data or the flags against the model (a token
// id past an embedding's rows, a sequence longer than a position table, a wrong input dtype
// or loss), so `mfsdp run` reports it as a usage error of one line (exit 2), not as an
// internal error with a traceback per rank.

#include <exception>
#include <string>

#include <torch/script.h>

namespace mfsdp::executor {

// From an interpreter error's text: the final reason ("index out of range in self") and the
// model's source line it points at first ("x = self.wte(idx) + self.wpe(pos)"); empty when
// the text has none.
std::string interpreter_reason(const std::string& what);
std::string interpreter_source_line(const std::string& what);

// Throws Error(kUsage): the reason, where in the model, the model's embeddings when an index
// was out of range, the batch's shape, dtype and id range, the flags to check, and (unless
// `verbose`, which appends the interpreter's whole text) a pointer to --verbose.
[[noreturn]] void fail_on_first_batch(const std::exception& error, const torch::jit::Module& model,
                                      const at::Tensor& input, bool verbose);

}  // namespace mfsdp::executor
