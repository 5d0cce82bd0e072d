// `mfsdp export CHECKPOINT -o trained.pt`: the trained parameters of a checkpoint, put back
// into the model, as an ordinary TorchScript file (torch.jit.load in Python or C++).
#include "cli/export_command.h"

#include <iostream>
#include <memory>

#include "cli/rank_launch.h"
#include "executor/train/export.h"

namespace mfsdp::cli {
namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string output;
  std::string model;
  bool quiet = false;
};

const char* kExamples = R"(
Examples:
  # The newest complete checkpoint of a run:
  mfsdp export ckpt/ -o trained.pt

  # One step's checkpoint, with the model file moved since training:
  mfsdp export ckpt/step-00001000 -o trained.pt --model models/gpt.pt

The model must have the structure the checkpoint's plan was made for. Trained parameters come
from the checkpoint; frozen parameters from the model file; buffers from rank 0.
Exit codes: 0 ok, 2 bad flags or a missing, damaged or mismatched checkpoint or model,
3 model cannot be loaded, 5 cannot write.
)";

}  // namespace

void add_export_command(CLI::App& app) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* cmd =
      app.add_subcommand("export", "Write a checkpoint's trained model as a TorchScript file");
  cmd->footer(kExamples);
  cmd->add_option("checkpoint", flags->checkpoint,
                  "A step-NNNNNNNN checkpoint directory, or the directory that holds them (its "
                  "newest complete checkpoint is used)")
      ->required();
  cmd->add_option("-o,--output", flags->output, "TorchScript file to write; written atomically")
      ->required();
  cmd->add_option("--model", flags->model,
                  "Model file to take the code and frozen tensors from (default: the path the "
                  "checkpoint recorded)");
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing on success");
  cmd->callback([flags] {
    check_output_directory("-o", flags->output);  // before the checkpoint is read
    const executor::ExportSummary summary =
        executor::export_model(flags->checkpoint, flags->output, flags->model);
    if (!flags->quiet) {
      std::cerr << "mfsdp export: " << summary.checkpoint << " (step " << summary.step << ") -> "
                << flags->output << "\n";
    }
  });
}

}  // namespace mfsdp::cli
