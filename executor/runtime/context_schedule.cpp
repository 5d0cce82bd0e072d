// The context's hooks and what they do: the plan's gathers, waits and reshards, binding
// the gathered parameters, gradients and their reduce-scatters, the end of backward.
#include <torch/csrc/autograd/engine.h>

#include <iostream>

#include "executor/runtime/context_impl.h"

namespace mfsdp::executor {

void Context::Impl::begin_microbatch() {
  runtime->check_compute_stream("a microbatch's forward");
  // Before any reduce-scatter can add into them from the reduce stream's thread.
  for (UnitRuntime& unit : units) {
    for (FlatGroup& group : unit.groups) group.main_grad();
  }
  microbatch_start_bytes = runtime->tensor_bytes();
  runtime->reset_memory_peak();
  cursor->restart();
  rs_order->restart();
}

void Context::Impl::pre_forward(int u) {
  remembering_errors([&] {
    if (phase.failed()) rethrow_failure(phase.error());
    if ((phase.in_microbatch() || phase.now() == Phase::kEvaluating) && cursor->in_backward()) {
      fail(ExitCode::kUsage,
           "unit " + name(u) +
               " reached pre_forward after the plan's forward was complete: "
               "either forward ran again before backward (call "
               "ctx->backward(loss) after every forward, or use "
               "ctx->evaluate() for a forward without backward) or the unit ran more often than "
               "planned");
    }
    if (phase.now() == Phase::kIdle) {
      phase.to(Phase::kForward);
      begin_microbatch();
    }
    UnitRuntime& unit = units[u];
    transition(unit.state, UnitState::kForward, name(u));
    perform(cursor->on_event(Point::kPreForward, u));
    if (!unit.bound()) bind(u);
    if (timeline) unit.forward_start_us = Timeline::now_us();
  });
}

// Mixed precision: a unit gathered in the plan's param dtype computes in it.
const char* Context::Impl::input_dtype(int) {
  return plan.policy.param_dtype ? plan.policy.param_dtype->c_str() : nullptr;
}

void Context::Impl::post_forward(int u) {
  remembering_errors([&] {
    transition(units[u].state, UnitState::kResting, name(u));
    if (timeline) {
      timeline->record("compute", "forward " + name(u), units[u].forward_start_us,
                       Timeline::now_us());
    }
    perform(cursor->on_event(Point::kPostForward, u));
  });
}

void Context::Impl::pre_backward(int u) {
  remembering_errors([&] { enter_backward(u); });
}

void Context::Impl::enter_backward(int u) {
  if (phase.now() == Phase::kForward) {
    // The first unit to see gradients arranges the end of backward, like FSDP's root.
    phase.to(Phase::kBackward);
    torch::autograd::Engine::get_default_engine().queue_callback([this] { end_of_backward(); });
  }
  transition(units[u].state, UnitState::kBackward, name(u));
  perform(cursor->on_event(Point::kPreBackward, u));
  if (timeline) units[u].backward_start_us = Timeline::now_us();
}

// --- Schedule actions -----------------------------------------------------------------
void Context::Impl::perform(const std::vector<ScheduleAction>& actions) {
  for (const ScheduleAction& a : actions) {
    switch (a.kind) {
      case ScheduleAction::Kind::kAllGather:
        issue_all_gather(a.unit);
        break;
      case ScheduleAction::Kind::kWait:
        wait_for_gather(a.unit);
        break;
      case ScheduleAction::Kind::kReshard:
        reshard(a.unit);
        break;
    }
  }
}

void Context::Impl::issue_all_gather(int u) {
  UnitRuntime& unit = units[u];
  transition(unit.shard_state, ShardState::kGathering, name(u));
  // The inputs first (a cast to the compute dtype runs on compute), then on a GPU one wait
  // for them, which also orders the gather after the slot's previous occupant's last use.
  std::vector<const void*> inputs;
  for (FlatGroup& group : unit.groups) inputs.push_back(group.gather_input());
  runtime->after_compute(*ag_stream);
  for (size_t g = 0; g < unit.groups.size(); ++g) {
    FlatGroup& group = unit.groups[g];
    live_bytes += group.unsharded_bytes();
    ag_comm->all_gather(inputs[g], group.unsharded().data_ptr(),
                        group.shard_bytes_in_compute_dtype(),
                        "all-gather of " + name(u) + " group " + std::to_string(g));
  }
  unit.gathered = ag_stream->record();
  peak_bytes = std::max(peak_bytes, live_bytes);
}

// Compute waits for the unit's all-gather; the time it is held up is exposed
// communication.
void Context::Impl::wait_for_gather(int u) {
  UnitRuntime& unit = units[u];
  if (unit.shard_state != ShardState::kGathering) return;
  runtime->compute_waits_for(unit.gathered, "all-gather of " + name(u));
  transition(unit.shard_state, ShardState::kGathered, name(u));
}

void Context::Impl::reshard(int u) {
  UnitRuntime& unit = units[u];
  // The slot may be reused right after: the all-gather into it must have finished. (On a
  // GPU the next all-gather into the slot runs on the same stream, after compute.)
  wait_for_gather(u);
  if (unit.shard_state == ShardState::kGathered) {
    for (const auto& group : unit.groups) live_bytes -= group.unsharded_bytes();
    transition(unit.shard_state, ShardState::kSharded, name(u));
  }
  unit.unbind(device);
}

void Context::Impl::bind(int u) {
  units[u].bind(
      phase.now() != Phase::kEvaluating,
      [this, u](int g, std::vector<at::Tensor>&& grads) { on_gradient(u, g, std::move(grads)); },
      [this, u](int g, size_t p, at::Tensor&& gradient) {
        on_early_gradient(u, g, p, std::move(gradient));
      });
}

// --- Gradients ------------------------------------------------------------------------
void Context::Impl::on_gradient(int u, int g, std::vector<at::Tensor>&& grads) {
  UnitRuntime& unit = units[u];
  if (!unit.take_gradients(g, std::move(grads))) return;
  if (unit.state == UnitState::kBackward) transition(unit.state, UnitState::kResting, name(u));
  if (timeline && unit.backward_start_us) {
    timeline->record("compute", "backward " + name(u), unit.backward_start_us, Timeline::now_us());
  }
  for (int w : rs_order->ready(u)) issue_reduce_scatter(w);
}

void Context::Impl::issue_reduce_scatter(int u) {
  UnitRuntime& unit = units[u];
  for (size_t g = 0; g < unit.groups.size(); ++g) {
    FlatGroup& group = unit.groups[g];
    if (!group.trainable()) continue;
    const std::vector<at::Tensor> none;
    const std::vector<at::Tensor>* arrived = unit.gradients(g);
    runtime->reduce_scatter_gradients(
        group, arrived ? *arrived : none,
        "reduce-scatter of " + name(u) + " group " + std::to_string(g));
    if (is_last_microbatch && replica_comm) {
      runtime->all_reduce(CommRole::kReplicas, group.main_grad(), ReduceOp::kAvg,
                          "all-reduce across replicas of " + name(u));
    }
  }
  unit.clear_gradients();
}

// A tied parameter's gradient from its uses so far, while more are to come (FlatGroup's
// early handler): reduce-scattered into the main gradient now instead of waiting beside
// the next use's gradient. The unit's own reduce-scatter adds the rest.
void Context::Impl::on_early_gradient(int u, int g, size_t p, at::Tensor&& gradient) {
  FlatGroup& group = units[u].groups[g];
  std::vector<at::Tensor> grads(group.layout().params.size());
  grads[p] = std::move(gradient);
  runtime->reduce_scatter_gradients(group, grads,
                                    "reduce-scatter of " + name(u) + " group " + std::to_string(g) +
                                        " (early, for tied " + group.layout().params[p].name + ")");
}

// The end of backward's wait for the reduce stream (the optimizer reads the main
// gradients), and failures so far are raised.
void Context::Impl::wait_for_reductions() {
  runtime->compute_waits_for(reduce_stream->record(), "reduce-scatters");
  runtime->check();
}

void Context::Impl::end_of_backward() {
  if (!phase.in_microbatch()) return;
  perform(cursor->finish());
  for (int w : rs_order->finish()) issue_reduce_scatter(w);
  // The main gradients are read after the last microbatch (clipping, the optimizer, the
  // caller): compute waits for the reduce stream then. An earlier microbatch leaves its
  // reduce-scatters in flight under the next one's forward (the next reduce-scatters queue
  // behind them on their stream); their failures still surface here once reported.
  if (is_last_microbatch) {
    wait_for_reductions();
  } else {
    runtime->check();
  }
  const int64_t peak = runtime->peak_tensor_bytes();
  if (peak - microbatch_start_bytes > activation_peak) {
    activation_peak = peak - microbatch_start_bytes;
    activation_peak_cached = runtime->cached_at_peak_bytes();
  }
  settle_units();
  if (microbatches_seen++ == 0) report_order(cursor->divergences());
  is_last_microbatch = true;
}

// After evaluate()'s forward: the forward entries left, then every unit resharded (no
// backward will use what the plan keeps gathered).
void Context::Impl::end_of_evaluation() {
  perform(cursor->finish_forward());
  for (size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
  settle_units();
  runtime->check();  // a failed all-gather would have left garbage in the output
}

void Context::Impl::settle_units() {
  for (auto& unit : units) unit.settle();
  phase.to(Phase::kIdle);
}

void Context::Impl::report_order(const std::vector<std::string>& found) {
  if (found.empty()) return;
  divergences = found;
  std::string text =
      "rank " + std::to_string(rank) +
      ": the first microbatch's unit order differs from the plan: " + found.front() +
      (found.size() > 1 ? " (and " + std::to_string(found.size() - 1) + " more)" : "");
  if (options.strict_order) {
    fail(ExitCode::kRuntime, text +
                                 "; re-plan with the real unit order, or allow skipped "
                                 "calls (strict_order off)");
  }
  std::cerr << "mfsdp: warning: " << text << "; collectives still follow the plan\n";
}

}  // namespace mfsdp::executor
