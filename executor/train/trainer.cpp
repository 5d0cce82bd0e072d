// train() (trainer.h): the training loop on one rank, from the context to the summary. The
// config's checks, the progress lines, metrics and --resume are in files of their own.
#include "executor/train/trainer.h"

#include <chrono>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include <torch/torch.h>

#include "executor/runtime/timeline.h"
#include "executor/train/checkpoint.h"
#include "executor/train/first_batch.h"
#include "executor/train/loss.h"
#include "executor/train/memory_report.h"
#include "executor/train/metrics_file.h"
#include "executor/train/progress.h"
#include "executor/train/resume.h"
#include "planner/torchscript/host_memory.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::executor {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

// The first nn.Embedding's vocabulary: token ids at or above it would index out of range.
std::optional<int64_t> embedding_rows(const torch::jit::Module& model) {
  for (const auto& m : model.named_modules()) {
    const auto type = m.value.type()->name();
    if (!type || type->name() != "Embedding" || !m.value.hasattr("num_embeddings")) continue;
    return m.value.attr("num_embeddings").toInt();
  }
  return std::nullopt;
}

// The model file with the trained values: parameters by name (tied names share one tensor in
// the file because they share one in the module), buffers from this rank's model.
void write_trained_model(const std::string& model_path, torch::jit::Module& trained,
                         const std::map<std::string, at::Tensor>& params, const std::string& out) {
  torch::jit::Module module = torch::jit::load(model_path);
  at::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    p.value.copy_(params.at(p.name));
  }
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : trained.named_buffers(/*recurse=*/true)) buffers[b.name] = b.value;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) b.value.copy_(buffers.at(b.name));
  std::ostringstream bytes;
  module.save(bytes);
  schema::write_file_atomically(out, bytes.str());
}

// The activation peak the ranks measured beside the plan's, scaled from the traced batch to
// this run's microbatch (activations grow linearly with it), or why there is none.
std::string activation_line(const schema::Plan& plan, const std::vector<MemoryBreakdown>& ranks,
                            const std::string& loss, int64_t microbatch) {
  int64_t measured = 0;
  for (const MemoryBreakdown& rank : ranks) measured = std::max(measured, rank.activation_peak);
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << "activations: peak " << mib(measured)
       << " measured";
  if (!plan.memory.activations) {
    line << "; plan with --trace-input to predict it (docs/plan-format.md#activations)";
    return line.str();
  }
  const schema::Activations& a = *plan.memory.activations;
  const double planned = static_cast<double>(a.peak_bytes) * static_cast<double>(microbatch) /
                         static_cast<double>(a.microbatch);
  line << " vs " << mib(static_cast<int64_t>(std::llround(planned))) << " planned";
  if (planned > 0)
    line << " (" << std::showpos << 100.0 * (measured - planned) / planned << std::noshowpos
         << " %)";
  line << " for microbatches of " << microbatch << " (the plan traced " << a.microbatch;
  if ((loss == "cross_entropy") != (a.loss == "cross_entropy")) {
    line << ", with " << a.loss << " loss where this run uses " << loss;
  }
  line << ")";
  return line.str();
}

}  // namespace

void train(const TrainConfig& config, const LaunchEnv& env, std::ostream& out) {
  check_train_config(config, env.world_size);
  if (config.threads > 0) at::set_num_threads(config.threads);
  ContextOptions options = config.context;
  options.record_timeline = !config.trace_path.empty();
  options.init_seed = static_cast<uint64_t>(config.data.seed);
  std::optional<std::string> checkpoint;
  if (config.resume) checkpoint = checkpoint_to_resume(config, env.rank == 0);
  options.weights_from_checkpoint = checkpoint.has_value();
  auto ctx = Context::create(config.plan_path, config.model_path, env, options);
  const bool lead = ctx->rank() == 0;
  if (!config.save_model.empty() && ctx->model_is_skeleton()) {
    fail(ExitCode::kUsage, "--save-model writes the model file with the trained values, but " +
                               ctx->model_path() +
                               " is a skeleton with no values to write around them; save "
                               "checkpoints (--checkpoint-dir) and mfsdp export them with "
                               "--format safetensors");
  }
  if (Timeline* timeline = ctx->timeline()) timeline->set_enabled(false);

  DataConfig data_config = config.data;
  data_config.vocab_size = config.vocab_size;
  if (data_config.vocab_size == 0) {
    const auto rows = embedding_rows(ctx->model());
    data_config.vocab_size = data_config.kind == "text" ? 256 : rows.value_or(256);
  }
  std::unique_ptr<DataSource> data = open_data(data_config, ctx->rank(), ctx->world_size());
  const Loss loss(parse_loss(config.loss), data_config);
  ShardedOptimizer optimizer(*ctx, config.optimizer);
  const int64_t microbatches = data_config.microbatches;
  // Set-up's high-water mark (the model as loaded) is in ctx->stats(); from here on the
  // mark is training's, and so is the allocator's: pages set-up freed are given back.
  host_memory::release_cache();
  host_memory::reset_peak_rss();
  int64_t optimizer_step_peak = 0;
  int64_t optimizer_step_peak_cached = 0;  // the allocator's reuse cache at that moment

  TrainingState state;
  state.config = config.describe();
  state.model_path = config.model_path;
  if (config.resume) state.step = resume(config, checkpoint, *ctx, optimizer, lead, out);
  if (state.step >= config.steps && lead) {
    out << "nothing to do: the checkpoint is at step " << state.step << " of --steps "
        << config.steps << std::endl;
  }

  std::optional<MetricsFile> metrics;
  if (!config.metrics_path.empty()) {
    // Rank 0 starts a fresh file (appends when resuming) before any rank writes to it.
    if (lead) metrics.emplace(config.metrics_path, state.step == 0);
    ctx->mean_over_ranks(0);
    if (!lead) metrics.emplace(config.metrics_path, false);
  }

  const int64_t first_step = state.step;
  const int64_t trace_first = first_step + (config.steps - first_step > 1 ? 1 : 0);
  const int64_t trace_end = trace_first + config.trace_steps;
  if (lead) {
    const int threads = at::get_num_threads();
    out << "mfsdp run: " << ctx->world_size() << " rank(s) on " << ctx->device_description() << ", "
        << threads << (threads == 1 ? " thread" : " threads") << " per rank, "
        << ctx->plan().units.size() << " units, " << data->describe() << ", global batch "
        << data_config.global_batch << " = " << ctx->world_size() << " rank(s) x " << microbatches
        << " microbatch(es) x " << data_config.global_batch / ctx->world_size() / microbatches
        << std::endl;
    if (!config.context.init_from.empty() || !config.context.init.empty()) {
      out << "mfsdp run: initial weights from " << ctx->weights_description()
          << (checkpoint ? " (--init-from and --init are for a start without one)" : "")
          << std::endl;
    }
  }

  Progress progress(config, out, data_config.global_batch);
  double total_ms = 0, total_exposed_ms = 0;
  int64_t timed = 0;
  int64_t last_saved = -1;
  for (int64_t step = state.step; step < config.steps; ++step) {
    Timeline* timeline = ctx->timeline();
    if (timeline) timeline->set_enabled(step >= trace_first && step < trace_end);
    const auto start = Clock::now();
    const int64_t start_us = Timeline::now_us();
    const int64_t exposed_before = ctx->stats().exposed_comm_us;
    const int64_t faults_before = host_memory::minor_faults();
    const double lr = learning_rate(config, step);
    optimizer.set_lr(lr);

    StepRecord record;
    at::Tensor local_loss;  // summed where the loss is, read once per step: one host sync
    for (int64_t m = 0; m < microbatches; ++m) {
      microbatch(*ctx, m + 1 == microbatches);
      Batch batch = data->batch(step, m);
      batch.input = batch.input.to(ctx->device());
      if (batch.target.defined()) batch.target = batch.target.to(ctx->device());
      const auto run_microbatch = [&] {
        const c10::IValue output = ctx->forward(loss.forward_inputs(batch));
        const at::Tensor value = loss.compute(output, batch) / static_cast<double>(microbatches);
        ctx->backward(value);
        const at::Tensor summed = value.detach().to(at::kDouble);
        local_loss = local_loss.defined() ? local_loss + summed : summed;
      };
      if (step > first_step || m > 0) {
        run_microbatch();
        continue;
      }
      try {
        run_microbatch();
      } catch (const Error&) {
        throw;  // mfsdp's own checks (the loss's, the executor's) already say what is wrong
      } catch (const std::exception& e) {
        fail_on_first_batch(e, ctx->model(), batch.input, config.verbose);
      }
    }
    record.local_loss = local_loss.item<double>();
    if (config.clip_grad_norm) record.grad_norm = ctx->clip_grad_norm(*config.clip_grad_norm);
    const int64_t optimizer_us = Timeline::now_us();
    const int64_t bytes_before_step = host_memory::tensor_bytes();
    host_memory::reset_peak();
    optimizer.step();
    // Temporaries only: state the step created (the first step's moments) stays counted.
    const int64_t step_peak =
        host_memory::peak_tensor_bytes() - std::max(bytes_before_step, host_memory::tensor_bytes());
    if (step_peak > optimizer_step_peak) {
      optimizer_step_peak = step_peak;
      optimizer_step_peak_cached = host_memory::cached_at_peak_bytes();
    }
    ctx->zero_grad();
    host_memory::end_step();
    if (timeline) timeline->record("compute", "optimizer step", optimizer_us, Timeline::now_us());
    record.loss = ctx->mean_over_ranks(record.local_loss);
    record.ms = ms_since(start);
    record.exposed_ms = (ctx->stats().exposed_comm_us - exposed_before) / 1000.0;
    const int64_t page_faults = host_memory::minor_faults() - faults_before;
    if (timeline)
      timeline->record("compute", "step " + std::to_string(step + 1), start_us, Timeline::now_us());
    if (!std::isfinite(record.loss)) {
      fail(ExitCode::kRuntime, "the loss is " + std::to_string(record.loss) + " at step " +
                                   std::to_string(step + 1) +
                                   "; lower --lr, add --warmup or --clip-grad-norm");
    }
    // The first step pays for warming up; leave it out of the means when there are others.
    if (step > first_step || config.steps - first_step == 1) {
      total_ms += record.ms;
      total_exposed_ms += record.exposed_ms;
      ++timed;
    }
    const double mean_ms = timed ? total_ms / timed : record.ms;
    if (metrics) {
      nlohmann::json j = {{"step", step + 1},
                          {"rank", ctx->rank()},
                          {"loss", record.loss},
                          {"rank_loss", record.local_loss},
                          {"lr", lr},
                          {"step_ms", record.ms},
                          {"exposed_comm_ms", record.exposed_ms},
                          {"samples_per_s", data_config.global_batch / (record.ms / 1000.0)},
                          {"peak_unsharded_bytes", ctx->stats().peak_unsharded_bytes},
                          {"rss_bytes", host_memory::rss_bytes()},
                          {"tensor_bytes", host_memory::tensor_bytes()},
                          {"page_faults", page_faults},
                          {"time", std::chrono::duration<double>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()}};
      if (record.grad_norm) j["grad_norm"] = *record.grad_norm;
      metrics->write(j);
    }
    if (lead) progress.step(step, lr, record, mean_ms);
    state.step = step + 1;
    if (config.checkpoint_every > 0 && state.step % config.checkpoint_every == 0) {
      const std::string path =
          save_checkpoint(*ctx, optimizer, config.checkpoint_dir, state, config.keep_checkpoints);
      last_saved = state.step;
      if (lead) out << "saved " << path << std::endl;
    }
  }
  if (!config.checkpoint_dir.empty() && last_saved != state.step && state.step > first_step) {
    const std::string path =
        save_checkpoint(*ctx, optimizer, config.checkpoint_dir, state, config.keep_checkpoints);
    if (lead) out << "saved " << path << std::endl;
  }
  if (!config.save_model.empty()) {
    const std::map<std::string, at::Tensor> params = ctx->full_parameters();  // every rank
    if (lead) {
      write_trained_model(config.model_path, ctx->model(), params, config.save_model);
      out << "wrote the trained model to " << config.save_model << std::endl;
    }
  }

  const ContextStats stats = ctx->stats();
  MemoryBreakdown memory;
  memory.rank = ctx->rank();
  if (ctx->device().is_cuda()) memory.device = "cuda";
  memory.runtime_base = stats.runtime_base_rss_bytes;
  memory.model_as_loaded = stats.model_bytes;
  memory.setup_peak_rss = stats.setup_peak_rss_bytes;
  memory.sharded_params = stats.sharded_param_bytes;
  memory.main_grads = stats.sharded_grad_bytes;
  memory.optimizer_state = optimizer.state_bytes();
  memory.slots = stats.slot_bytes;
  memory.activation_peak = stats.activation_peak_bytes;
  // Host tensors only: on a GPU the optimizer's temporaries are not counted.
  if (memory.device == "cpu") {
    memory.optimizer_step_peak = optimizer_step_peak;
    memory.cache = memory.activation_peak >= optimizer_step_peak
                       ? stats.activation_peak_cached_bytes
                       : optimizer_step_peak_cached;
    memory.heap_objects = std::max<int64_t>(
        0, host_memory::heap_object_bytes() - stats.runtime_base_heap_object_bytes);
  }
  memory.peak_rss = host_memory::peak_rss_bytes();
  memory.code =
      std::max<int64_t>(0, host_memory::file_rss_bytes() - stats.runtime_base_file_rss_bytes);
  if (metrics) metrics->write({{"rank", ctx->rank()}, {"memory", memory.to_json()}});
  host_memory::release_cache();  // training is over: the pages its steps kept go back
  const double exposed_pct = total_ms > 0 ? 100.0 * total_exposed_ms / total_ms : 0.0;
  std::ostringstream mine;
  mine << exposed_pct << " " << stats.peak_unsharded_bytes;
  const std::vector<std::string> ranks = ctx->exchange("run-summary", mine.str());
  const std::vector<std::string> breakdowns = ctx->exchange("memory", memory.to_json().dump());
  if (Timeline* timeline = ctx->timeline()) {
    const std::vector<std::string> events =
        ctx->exchange("trace", trace_events_json(ctx->rank(), timeline->take()));
    if (lead) {
      schema::write_file_atomically(config.trace_path, chrome_trace_json(events));
      out << "wrote the trace of steps " << trace_first + 1 << "-"
          << std::min(trace_end, config.steps) << " to " << config.trace_path
          << " (open it in https://ui.perfetto.dev or chrome://tracing)" << std::endl;
    }
  }
  if (!lead || timed == 0) return;
  double exposed_sum = 0;
  int64_t worst_peak = 0;
  for (const std::string& rank : ranks) {
    std::istringstream in(rank);
    int64_t peak = 0;
    double pct = 0;
    in >> pct >> peak;
    exposed_sum += pct;
    worst_peak = std::max(worst_peak, peak);
  }
  std::vector<MemoryBreakdown> all;
  std::string rss;
  for (const std::string& b : breakdowns) {
    all.push_back(MemoryBreakdown::from_json(nlohmann::json::parse(b)));
    rss += (rss.empty() ? "" : ", ") + std::string("rank ") + std::to_string(all.back().rank) +
           " " + mib(all.back().process_peak_rss());
  }
  const double mean_ms = total_ms / timed;
  const int64_t planned = ctx->plan().memory.peak_unsharded_bytes;
  out << std::fixed << std::setprecision(1) << "done: " << state.step - first_step
      << " steps; mean step " << mean_ms << " ms; " << std::setprecision(0)
      << data_config.global_batch / (mean_ms / 1000.0) << " samples/s; exposed communication "
      << std::setprecision(1) << exposed_sum / ranks.size() << " % of step time" << std::endl;
  out << "memory: peak unsharded " << worst_peak << " B measured vs " << planned << " B planned"
      << (worst_peak == planned ? "" : " (differs)") << "; sharded params "
      << stats.sharded_param_bytes << " B per rank; peak RSS " << rss << std::endl;
  out << activation_line(ctx->plan(), all, config.loss,
                         data_config.global_batch / ctx->world_size() / microbatches)
      << std::endl;
  out << memory_table(all) << std::flush;
}

}  // namespace mfsdp::executor
