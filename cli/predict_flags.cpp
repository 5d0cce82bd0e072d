#include "cli/predict_flags.h"

#include <cmath>
#include <cstdlib>

#include "cli/whole_number.h"
#include "predict/profile.h"
#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::cli {

void add_predict_flags(CLI::App& cmd, PredictFlags& flags, const std::string& when) {
  cmd.add_option("--profile", flags.profile,
                 "Machine profile: a file from mfsdp probe, or a built-in: " +
                     predict::builtin_profile_list() + " (docs/predict.md)")
      ->type_name("FILE|NAME");
  cmd.add_option("--microbatches", flags.microbatches,
                 when + "microbatches per step (default: the plan's training defaults, else 1)")
      ->type_name("N");
  cmd.add_option("--microbatch-size", flags.microbatch_size,
                 when +
                     "samples per microbatch per rank (default: the plan's global batch split "
                     "over ranks and microbatches, else the traced batch)")
      ->type_name("N");
  cmd.add_option("--compute-scale", flags.compute_scale,
                 when +
                     "multiply the trace's compute times by this (default: the trace's reference "
                     "matmul rate over the profile's)")
      ->type_name("R");
  cmd.add_option("--optimizer", flags.optimizer,
                 when +
                     "the optimizer whose step and state count (default: the plan's, else "
                     "adamw)")
      ->check(CLI::IsMember(schema::optimizer_names()));
}

const std::vector<std::string>& predict_detail_flags() {
  static const std::vector<std::string> names = {"--microbatches", "--microbatch-size",
                                                 "--compute-scale", "--optimizer"};
  return names;
}

predict::PredictRequest predict_request(const PredictFlags& flags) {
  predict::PredictRequest request;
  request.profile = flags.profile;
  if (!flags.microbatches.empty()) {
    request.microbatches =
        whole_number(flags.microbatches, "--microbatches", 1, 1 << 20, "from 1 to 1048576");
  }
  if (!flags.microbatch_size.empty()) {
    request.microbatch_size = whole_number(flags.microbatch_size, "--microbatch-size", 1,
                                           int64_t{1} << 30, "from 1 to 1073741824");
  }
  if (!flags.compute_scale.empty()) {
    char* end = nullptr;
    const double scale = std::strtod(flags.compute_scale.c_str(), &end);
    if (end == flags.compute_scale.c_str() || *end != '\0' || !(scale > 0) ||
        !std::isfinite(scale)) {
      fail(ExitCode::kUsage,
           "--compute-scale " + flags.compute_scale + " is not a number > 0 (e.g. 0.5)");
    }
    request.compute_scale = scale;
  }
  if (!flags.optimizer.empty()) request.optimizer = flags.optimizer;
  return request;
}

}  // namespace mfsdp::cli
