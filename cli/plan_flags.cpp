#include "cli/plan_flags.h"

namespace mfsdp::cli {
namespace {

const char* kExamples = R"(
Examples:
  # Each transformer block is a unit, plus the model for the rest (embeddings, head):
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>'

  # The same by class name, 2 replicas x 4 shards (HSDP), bf16 all-gathers:
  mfsdp plan gpt.pt --world-size 8 --replicate 2 --unit-type Block --unit '<root>' \
      --param-dtype bfloat16

  # Every ModuleList element plus the model; prefetch two units ahead, cap gathered memory:
  mfsdp plan gpt.pt --world-size 4 --auto --prefetch 2 --resident-budget 2GiB -o gpt.plan.json

  # Recompute each block's forward in backward instead of keeping its activations
  # (activation checkpointing); trace a step to see the memory it saves:
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --checkpoint 'layers.*' \
      --trace-input 2x64:int64

  # Keep the last block (of 4 here) gathered from its forward to its backward, saving its
  # backward all-gather (FSDP2's per-module reshard_after_forward=False):
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --keep-after-forward 'layers.3'

  # Two blocks per unit: one all-gather and one reduce-scatter for each pair (FSDP2's
  # fully_shard([a, b])); fewer, larger collectives:
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.0+layers.1' --unit 'layers.2+layers.3' \
      --unit '<root>'

  # A long scope kept in a file (format: docs/cli.md):
  mfsdp plan gpt.pt --scope scope.json

  # Settle branches and loops, time each unit and measure its activations by running one step
  # on a 2x64 batch of token ids:
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --trace-input 2x64:int64

  # The same on meta tensors (shapes only, no times): activation memory and per-unit FLOPs,
  # in about a second for a model too large to run here or a skeleton (docs/large-models.md):
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --trace-input 2x64:int64 \
      --trace-device meta

  # Record training defaults for mfsdp run (its flags win), e.g. {"steps": 1000, "lr": 3e-4}:
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --training train.json

  # Let mfsdp choose units, prefetch, resharding and streams for 8 H100s within 40 GiB a rank,
  # from a trace on this CPU scaled by a measured ratio (docs/predict.md); --sweep lists all:
  mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>' --trace-input 2x64:int64 \
      --profile h100-nvlink --compute-scale 0.02 --optimize --memory-budget 40GiB

  # Without a trace: the plan with the fewest collectives that fits 40 GiB (activations aside):
  mfsdp plan gpt.pt --world-size 8 --auto --optimize --memory-budget 40GiB

Selectors: '*' matches one path segment, '**' any number; '<root>' (or '') is the model;
'a+b' makes modules a and b one merged unit (they must run one after another).
Units register in flag order, then definition order within a glob (layers.9 before layers.10).
Exit codes: 0 ok, 2 bad flags, 3 model cannot be loaded (or the traced step fails), 4 scope cannot
be planned, 5 cannot write.
)";

}  // namespace

void add_plan_flags(CLI::App& cmd, PlanFlags& flags) {
  cmd.footer(kExamples);
  cmd.add_option("model", flags.model, "TorchScript model file (torch.jit.script(m).save)")
      ->required();
  cmd.add_option("-o,--output", flags.output,
                 "Plan file to write (default: <model name>.plan.json); written atomically");
  cmd.add_option("--world-size", flags.world_size,
                 "Number of ranks the plan is for, 1 to 2147483647")
      ->type_name("INT");
  cmd.add_option("--replicate", flags.replicate,
                 "HSDP replicas: world = shard x replicate (default 1: plain FSDP)")
      ->type_name("INT");
  cmd.add_option("--unit", flags.unit_globs,
                 "fully_shard the modules matching this path glob (repeatable); globs joined "
                 "by '+' make one merged unit, e.g. 'layers.0+layers.1'")
      ->allow_extra_args(false);
  cmd.add_option("--unit-type", flags.unit_types,
                 "fully_shard every module of this class, e.g. Block (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--checkpoint", flags.checkpoint_globs,
                 "Activation checkpointing for the units matching this path glob: their "
                 "forward keeps no activations and is recomputed in backward (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--checkpoint-type", flags.checkpoint_types,
                 "Activation checkpointing for every unit of this class (repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--keep-after-forward", flags.keep_globs,
                 "Keep the units matching this path glob gathered from their forward to their "
                 "backward (FSDP2's per-module reshard_after_forward=False): one all-gather "
                 "less each, more memory (repeatable)")
      ->allow_extra_args(false);
  cmd.add_flag("--auto", flags.auto_units,
               "fully_shard every element of every ModuleList, then the model");
  cmd.add_option("--scope", flags.scope_file,
                 "JSON scope file: ordered fully_shard list plus mesh and policy");
  cmd.add_option("--param-dtype", flags.param_dtype,
                 "Gather and compute floating parameters in this dtype (bfloat16, float16, "
                 "float32, float64; 'keep' = as stored; default keep)");
  cmd.add_option("--reduce-dtype", flags.reduce_dtype,
                 "Dtype of gradient reduce-scatters (default float32); main grads stay float32 "
                 "under bfloat16 or float16");
  // Each switch is a pair of flags, so that a flag can undo a scope file either way.
  cmd.add_flag("--reshard-after-forward", flags.reshard_after_forward,
               "Free each unit's gathered parameters after its forward (the default)");
  cmd.add_flag("--no-reshard-after-forward", flags.no_reshard_after_forward,
               "Keep each unit gathered from its forward until its backward: fewer "
               "all-gathers, more memory");
  cmd.add_option("--prefetch", flags.prefetch, "All-gathers to keep in flight ahead (default 1)")
      ->type_name("INT");
  cmd.add_option("--forward-prefetch", flags.forward_prefetch,
                 "Prefetch depth in forward (default: --prefetch)")
      ->type_name("INT");
  cmd.add_option("--backward-prefetch", flags.backward_prefetch,
                 "Prefetch depth in backward (default: --prefetch)")
      ->type_name("INT");
  cmd.add_option("--resident-budget", flags.resident_budget,
                 "Cap on gathered (unsharded) bytes, e.g. 4GiB; prefetch waits to stay under it "
                 "(default: no cap)")
      ->type_name("SIZE");
  cmd.add_flag(
      "--unified-stream", flags.unified_stream,
      "Issue all collectives on one stream instead of separate all-gather and reduce-scatter "
      "streams");
  cmd.add_flag("--no-unified-stream", flags.no_unified_stream,
               "Separate all-gather and reduce-scatter streams (the default)");
  cmd.add_option("--align", flags.align_bytes,
                 "Align parameter offsets and shard boundaries to this many bytes, a power of "
                 "two up to 1073741824 (default 16)")
      ->type_name("INT");
  cmd.add_option("--trace-input", flags.trace_inputs,
                 "Run one forward/backward on a tensor of this SHAPE[:DTYPE] (e.g. 2x64:int64, "
                 "at most 1 GiB; one per forward argument, in order) and plan the unit calls "
                 "and orders it observes; records per-unit times and activation memory")
      ->allow_extra_args(false);
  cmd.add_option("--trace-repeats", flags.trace_repeats,
                 "Time the traced step this many more times after the first and record the "
                 "median unit times, for predicting the step (docs/predict.md); 1 times the "
                 "first step itself (default: at least 3, and more until they took 0.5 s, at "
                 "most 50)")
      ->type_name("N");
  cmd.add_option("--trace-device", flags.trace_device,
                 "Where the traced step runs: cpu (the default: real values, timed) or meta "
                 "(shapes only: nothing is computed or timed, so a model of any size, a "
                 "skeleton too, traces in seconds; records activation memory and each unit's "
                 "FLOPs and bytes instead of times; docs/plan-format.md#work)")
      ->type_name("cpu|meta");
  cmd.add_flag("--fused-attention", flags.fused_attention,
               "With --trace-device meta: run scaled-dot-product attention as a GPU's fused "
               "kernel (FlashAttention, cuDNN) does instead of LibTorch's math form: it saves "
               "no L x S scores, skips what a causal mask hides, and recomputes the scores in "
               "backward (docs/predict.md#fused-attention)");
  cmd.add_option("--trace-threads", flags.trace_threads,
                 "Intra-op threads of the traced step, so that its times are a rank's "
                 "(default: OMP_NUM_THREADS, else the cores shared out among --world-size "
                 "ranks, as mfsdp run does on one node)")
      ->type_name("N");
  cmd.add_option("--training", flags.training_file,
                 "JSON file of training defaults for mfsdp run (steps, global_batch, lr, ...; "
                 "docs/plan-format.md#training), written into the plan; run's flags win")
      ->allow_extra_args(false);
  cmd.add_flag("--optimize", flags.optimize,
               "Try other units (every block + the model, with none, half or every block "
               "checkpointed; adjacent blocks merged in twos and fours + the model; a unit per "
               "repeated block class; the model alone) and policies "
               "(prefetch 0-2, streams, how many "
               "units stay gathered for backward), predict each on --profile, and write the "
               "fastest that fits --memory-budget; without --trace-input, the one with the "
               "fewest collectives that fits (docs/predict.md)");
  cmd.add_flag("--sweep", flags.sweep,
               "Print every plan --optimize tries: memory per rank, predicted step, the "
               "Pareto front (writes your plan unless --optimize)");
  cmd.add_option("--sweep-world", flags.sweep_worlds,
                 "With --sweep or --optimize: the chosen plan's memory per rank and predicted "
                 "step at these world sizes, e.g. 8,16,32,64")
      ->type_name("N,N,...");
  cmd.add_option("--memory-budget", flags.memory_budget,
                 "With --optimize: the most a rank may hold (sharded params, grads, optimizer "
                 "state, gathered slots, traced activations), e.g. 40GiB")
      ->type_name("SIZE");
  add_predict_flags(cmd, flags.prediction, "With --profile: ");
  cmd.add_flag("-q,--quiet", flags.quiet, "Print nothing on success");
  cmd.add_flag("--json-summary", flags.json_summary,
               "Print the summary as JSON on stdout instead of text on stderr");
}

}  // namespace mfsdp::cli
