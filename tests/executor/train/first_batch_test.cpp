// Reading the TorchScript interpreter's error text for the first-batch usage error.
#include <gtest/gtest.h>

#include "executor/train/first_batch.h"

namespace mfsdp::executor {
namespace {

// The shape of LibTorch 1.13's text (2.x's is the same in these parts).
const char* const kText = R"(The following operation failed in the TorchScript interpreter.
Traceback of TorchScript, serialized code (most recent call last):
  File "code/__torch__/fixtures.py", line 18, in forward
    wpe = self.wpe
    x = torch.add(_0, (wpe).forward(pos, ))
                       ~~~~~~~~~~~~ <--- HERE

Traceback of TorchScript, original code (most recent call last):
  File "tests/fixtures/make_fixtures.py", line 147, in forward
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
                            ~~~~~~~~ <--- HERE
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
           ~~~~~~~~~~~~~~~ <--- HERE
RuntimeError: index out of range in self
)";

TEST(FirstBatch, ReasonIsTheFinalExceptionLine) {
  EXPECT_EQ(interpreter_reason(kText), "index out of range in self");
  EXPECT_EQ(interpreter_reason("Expected at most 2 argument(s)\nDeclaration: forward(...)"),
            "Expected at most 2 argument(s)");
  EXPECT_EQ(interpreter_reason(""), "");
}

TEST(FirstBatch, SourceLineIsTheModelsFirstMarkedLine) {
  EXPECT_EQ(interpreter_source_line(kText), "x = self.wte(idx) + self.wpe(pos)");
  EXPECT_EQ(interpreter_source_line("no traceback here"), "");
}

}  // namespace
}  // namespace mfsdp::executor
