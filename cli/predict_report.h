#pragma once
// `mfsdp show --predict`'s report: a plan's prediction (predict/plan_prediction.h) as text and
// as JSON, with what a run measured beside it when given. No LibTorch.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "predict/plan_prediction.h"

namespace mfsdp::cli {

std::string render_prediction_text(const predict::PlanPrediction& p, const std::string& plan_path);
nlohmann::ordered_json prediction_json(const predict::PlanPrediction& p);

// What a rank of `plan` holds under the prediction's optimizer and microbatch, term by term,
// and with a budget (bytes) whether it fits and, if not, what would make it fit
// (predict/memory_fit.h): the `memory`, `budget` and `to fit` lines, and the same as JSON.
std::string render_memory_text(const schema::Plan& plan, const predict::PlanPrediction& p,
                               const std::optional<int64_t>& budget);
nlohmann::ordered_json memory_json(const schema::Plan& plan, const predict::PlanPrediction& p,
                                   const std::optional<int64_t>& budget);

}  // namespace mfsdp::cli
