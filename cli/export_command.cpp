// `mfsdp export CHECKPOINT -o trained.pt`: the trained parameters of a checkpoint, put back
// into the model, as an ordinary TorchScript file (torch.jit.load in Python or C++), or with
// --format safetensors as a Hugging Face safetensors directory.
#include "cli/export_command.h"

#include <iostream>
#include <memory>

#include "cli/byte_size.h"
#include "cli/rank_launch.h"
#include "executor/train/export.h"
#include "schema/error.h"

namespace mfsdp::cli {
namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string output;
  std::string model;
  std::string format = "torchscript";
  std::string max_file_size = "5GB";
  bool quiet = false;
};

const char* kExamples = R"(
Examples:
  # The newest complete checkpoint of a run:
  mfsdp export ckpt/ -o trained.pt

  # One step's checkpoint, with the model file moved since training:
  mfsdp export ckpt/step-00001000 -o trained.pt --model models/gpt.pt

  # Hugging Face safetensors, in files of at most 2 GB (vLLM, transformers, llama.cpp read it):
  mfsdp export ckpt/ --format safetensors -o trained/ --max-file-size 2GB

The model must have the structure the checkpoint's plan was made for. Trained parameters come
from the checkpoint; frozen parameters from the model file; buffers from rank 0. safetensors
holds every parameter under its own name in the dtype it trained in (a tied weight once, under
its first name), then the buffers; tensors are streamed from the rank files, never gathered
(docs/large-models.md).
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
  cmd->add_option("-o,--output", flags->output,
                  "TorchScript file to write, or with --format safetensors the directory to "
                  "write (made if missing); written atomically, file by file")
      ->required();
  cmd->add_option("--format", flags->format,
                  "torchscript (default): one model file; safetensors: model.safetensors, or "
                  "model-0000K-of-0000N.safetensors files and model.safetensors.index.json")
      ->check(CLI::IsMember({"torchscript", "safetensors"}));
  cmd->add_option("--max-file-size", flags->max_file_size,
                  "safetensors: tensor bytes per file at most (default 5GB, as transformers); a "
                  "larger tensor gets a file of its own");
  cmd->add_option("--model", flags->model,
                  "Model file to take the code and frozen tensors from (default: the path the "
                  "checkpoint recorded)");
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing on success");
  cmd->callback([flags] {
    const bool safetensors = flags->format == "safetensors";
    std::string output = flags->output;  // a safetensors directory may be given as "out/"
    while (safetensors && output.size() > 1 && output.back() == '/') output.pop_back();
    check_output_directory("-o", output);  // before the checkpoint is read
    const int64_t max_file_bytes = parse_bytes(flags->max_file_size, "--max-file-size");
    if (max_file_bytes <= 0) {
      fail(ExitCode::kUsage,
           "--max-file-size must be at least 1 byte; got " + flags->max_file_size);
    }
    const executor::ExportSummary summary =
        safetensors
            ? executor::export_safetensors(flags->checkpoint, output, max_file_bytes, flags->model)
            : executor::export_model(flags->checkpoint, flags->output, flags->model);
    if (!flags->quiet) {
      std::cerr << "mfsdp export: " << summary.checkpoint << " (step " << summary.step << ") -> "
                << flags->output;
      if (safetensors) {
        std::cerr << " (" << summary.files.size() << " safetensors file"
                  << (summary.files.size() == 1 ? "" : "s") << ")";
      }
      std::cerr << "\n";
    }
  });
}

}  // namespace mfsdp::cli
