#include "executor/runtime/context.h"

#include "executor/runtime/context_impl.h"

namespace mfsdp::executor {

void rethrow_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    fail(e.code(), std::string("this context failed earlier and cannot continue: ") + e.what());
  } catch (const std::exception& e) {
    fail(ExitCode::kRuntime,
         std::string("this context failed earlier and cannot continue: ") + e.what());
  }
  fail(ExitCode::kRuntime, "this context failed earlier and cannot continue");
}

Context::Impl::~Impl() {
  planner::set_unit_hooks(previous_hooks);
  // Tensors that LibTorch's allocator knows to be in use on a GPU stream (gradients handed
  // to reduce-scatters) must be freed while that stream exists.
  units.clear();
  // Streams must stop before the buffers their work points at go away.
  runtime.reset();
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;

torch::jit::Module& Context::model() {
  return impl_->module;
}

void Context::check_usable() const {
  if (impl_->phase.failed()) rethrow_failure(impl_->phase.error());
}

c10::IValue Context::forward(std::vector<c10::IValue> inputs) {
  check_usable();
  impl_->pending_error = nullptr;
  try {
    return impl_->module.forward(std::move(inputs));
  } catch (...) {
    planner::abandon_checkpointed_calls();
    if (impl_->pending_error) std::rethrow_exception(impl_->pending_error);
    throw;
  }
}
const std::string& Context::model_path() const {
  return impl_->model_path;
}
const schema::Plan& Context::plan() const {
  return impl_->plan;
}
int Context::rank() const {
  return impl_->rank;
}
int Context::world_size() const {
  return static_cast<int>(impl_->plan.mesh.world_size);
}
at::Device Context::device() const {
  return impl_->device;
}
bool Context::model_is_skeleton() const {
  return impl_->skeleton;
}
const std::string& Context::weights_description() const {
  return impl_->weights_description;
}
const std::string& Context::device_description() const {
  return impl_->runtime->description();
}

void Context::microbatch(bool is_last) {
  if (impl_->phase.in_microbatch()) {
    fail(ExitCode::kUsage,
         "microbatch() called in the middle of a microbatch; call it before the "
         "forward");
  }
  impl_->is_last_microbatch = is_last;
}

void Context::backward(const at::Tensor& loss) {
  check_usable();
  try {
    loss.backward();
    impl_->end_of_backward();
  } catch (...) {
    impl_->phase.fail(std::current_exception());
    throw;
  }
}

c10::IValue Context::evaluate(std::vector<c10::IValue> inputs) {
  check_usable();
  if (impl_->phase.in_microbatch()) {
    fail(ExitCode::kUsage,
         "evaluate() called in the middle of a training microbatch; call backward() first");
  }
  torch::NoGradGuard no_grad;
  try {
    impl_->phase.to(Phase::kEvaluating);
    impl_->begin_microbatch();
    c10::IValue out = forward(std::move(inputs));
    impl_->end_of_evaluation();
    return out;
  } catch (...) {
    impl_->phase.fail(std::current_exception());
    throw;
  }
}

std::vector<std::string> Context::exchange(const std::string& key, const std::string& value) {
  return impl_->rendezvous->exchange("user/" + key, value);
}

Timeline* Context::timeline() {
  return impl_->timeline.get();
}

}  // namespace mfsdp::executor
