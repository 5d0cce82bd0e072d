// Gradient operations over the sharded main gradients (sync, zero, clip), full parameters for
// export, scalar all-reduces and the context's statistics.
#include <cmath>

#include "executor/runtime/context_impl.h"

namespace mfsdp::executor {

std::vector<at::Tensor> Context::sharded_parameters() {
  sync_gradients();
  std::vector<at::Tensor> out;
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (group.trainable()) out.push_back(group.master());
    }
  }
  return out;
}

void Context::sync_gradients() {
  // The optimizer reads the main gradients next. A reduce-scatter or replica all-reduce that
  // failed or was aborted (its event completes too) must surface here, on the host, before
  // what it left in the main gradients reaches the masters: one host wait per optimizer step.
  impl_->reduce_stream->record()->wait();
  impl_->runtime->check();
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (!group.trainable()) continue;
      const bool same = group.master().scalar_type() == group.main_grad().scalar_type();
      group.master().mutable_grad() =
          same ? group.main_grad() : group.main_grad().to(group.master().scalar_type());
    }
  }
}

void Context::zero_grad() {
  impl_->wait_for_reductions();  // none may still add into what is zeroed (a no-op after a step)
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (group.trainable()) group.main_grad().zero_();
    }
  }
}

double Context::clip_grad_norm(double max_norm) {
  impl_->wait_for_reductions();  // a no-op after the last microbatch's backward
  at::Tensor squares;  // summed on the device, read once: one host sync, not one per group
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (!group.trainable()) continue;
      const at::Tensor s = group.main_grad().to(at::kDouble).pow(2).sum();
      squares = squares.defined() ? squares + s : s;
    }
  }
  const double local = squares.defined() ? squares.item<double>() : 0.0;
  // Shards are disjoint within a shard group and identical across replicas.
  const double value =
      impl_->runtime->all_reduce_scalar(local, ReduceOp::kSum, "gradient-norm all-reduce");
  const double replicas = static_cast<double>(impl_->plan.mesh.replicate_size);
  const double norm = std::sqrt(value / replicas);
  if (norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (auto& unit : impl_->units) {
      for (auto& group : unit.groups) {
        if (group.trainable()) group.main_grad().mul_(scale);
      }
    }
  }
  return norm;
}

double Context::mean_over_ranks(double value) {
  return impl_->runtime->all_reduce_scalar(value, ReduceOp::kAvg, "mean over ranks");
}

std::map<std::string, at::Tensor> Context::full_parameters() {
  std::map<std::string, at::Tensor> out;
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      at::Tensor master = group.master().detach().contiguous();
      at::Tensor full = at::empty({group.layout().padded_numel}, master.options());
      const int64_t bytes = master.numel() * master.element_size();
      impl_->runtime->after_compute(*impl_->ag_stream);
      impl_->ag_comm->all_gather(master.data_ptr(), full.data_ptr(), bytes,
                                 "full-parameter all-gather of " + unit.plan->name);
      impl_->ag_stream->synchronize();
      const std::vector<at::Tensor> values = group.unflatten(full);
      for (size_t p = 0; p < values.size(); ++p) {
        const auto& layout = group.layout().params[p];
        const at::Tensor value = values[p].to(at::kCPU);
        out[layout.name] = value;
        for (const auto& alias : layout.aliases) out[alias] = value;
      }
    }
  }
  return out;
}

ContextStats Context::stats() const {
  ContextStats s;
  for (const auto& unit : impl_->units) {
    for (const auto& group : unit.groups) {
      // What is really allocated, not what the layout says.
      const at::Tensor& master = group.master();
      s.sharded_param_bytes += master.numel() * master.element_size();
      s.sharded_grad_bytes += group.main_grad_bytes();
    }
  }
  s.slot_bytes = impl_->runtime->slot_bytes();
  s.peak_unsharded_bytes = impl_->peak_bytes;
  s.divergences = impl_->divergences;
  s.exposed_comm_us = impl_->runtime->exposed_us();
  s.runtime_base_rss_bytes = impl_->base_rss;
  s.runtime_base_file_rss_bytes = impl_->base_file_rss;
  s.model_bytes = impl_->model_bytes;
  s.setup_peak_rss_bytes = impl_->setup_peak_rss;
  s.activation_peak_bytes = impl_->activation_peak;
  s.activation_peak_cached_bytes = impl_->activation_peak_cached;
  s.runtime_base_heap_object_bytes = impl_->base_heap_objects;
  return s;
}

}  // namespace mfsdp::executor
