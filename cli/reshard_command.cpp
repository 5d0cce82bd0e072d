// `mfsdp reshard CHECKPOINT --plan NEW_PLAN -o DIR`: a checkpoint laid out for another plan of
// the same model (world size, mesh, units), in one process, ahead of a cluster change.
#include "cli/reshard_command.h"

#include <iostream>
#include <memory>

#include "executor/train/reshard.h"

namespace mfsdp::cli {
namespace {

struct ReshardFlags {
  std::string checkpoint;
  std::string plan;
  std::string output;
  bool quiet = false;
};

const char* kExamples = R"(
Examples:
  # Trained on 2 ranks, continue on 4: plan for 4, reshard, resume from the new directory.
  mfsdp plan gpt.pt --world-size 4 --unit 'layers.*' --unit '<root>' -o gpt4.plan.json
  mfsdp reshard ckpt/ --plan gpt4.plan.json -o ckpt-4ranks
  mfsdp run gpt4.plan.json --nproc-per-node 4 --input-shape 64 --global-batch 32 \
      --steps 200 --checkpoint-dir ckpt-4ranks --resume

`mfsdp run NEW_PLAN --resume CKPT` reshards at start-up without this step; reshard ahead to
check the conversion, or to keep the old ranks' files out of the new run's reads.
Master parameters, optimizer state (moments, momentum, step counts), the step, buffers and
generator states carry over; docs/checkpoints.md#resharding says what is exact.
Exit codes: 0 ok, 2 a missing or damaged checkpoint, a plan of another model or a bad plan,
an existing output step, 5 cannot write.
)";

}  // namespace

void add_reshard_command(CLI::App& app) {
  auto flags = std::make_shared<ReshardFlags>();
  CLI::App* cmd = app.add_subcommand(
      "reshard", "Lay a checkpoint out for another plan of its model (world size, mesh, units)");
  cmd->footer(kExamples);
  cmd->add_option("checkpoint", flags->checkpoint,
                  "A step-NNNNNNNN checkpoint directory, or the directory that holds them (its "
                  "newest complete checkpoint is used)")
      ->required();
  cmd->add_option("--plan", flags->plan, "The plan to lay the checkpoint out for")->required();
  cmd->add_option("-o,--output", flags->output,
                  "Checkpoint directory to write step-NNNNNNNN/ into (created if needed; a "
                  "step already there is refused)")
      ->required();
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing on success");
  cmd->callback([flags] {
    const executor::ReshardSummary summary =
        executor::reshard_checkpoint(flags->checkpoint, flags->plan, flags->output);
    if (!flags->quiet) {
      std::cerr << "mfsdp reshard: " << summary.from << " (step " << summary.step << "; "
                << summary.from_layout << ") -> " << summary.to << " (" << summary.to_layout
                << ")\n";
    }
  });
}

}  // namespace mfsdp::cli
