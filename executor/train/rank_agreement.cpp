#include "executor/train/rank_agreement.h"

#include "executor/runtime/context.h"

namespace mfsdp::executor {

std::exception_ptr attempt(ExitCode code, const std::string& what,
                           const std::function<void()>& part) {
  try {
    part();
    return nullptr;
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    const std::string text = e.what();
    return std::make_exception_ptr(Error(code, what + ": " + text.substr(0, text.find('\n'))));
  }
}

void agree(Context& context, const std::exception_ptr& mine, ExitCode code,
           const std::string& others_failed) {
  const double succeeded = context.mean_over_ranks(mine ? 0.0 : 1.0) * context.world_size();
  if (mine) std::rethrow_exception(mine);
  if (succeeded < context.world_size() - 0.5) fail(code, others_failed);
}

}  // namespace mfsdp::executor
