#pragma once
// `mfsdp show --predict`'s report: a plan's prediction (predict/plan_prediction.h) as text and
// as JSON, with what a run measured beside it when given. No LibTorch.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "predict/plan_prediction.h"

namespace mfsdp::cli {

std::string render_prediction_text(const predict::PlanPrediction& p, const std::string& plan_path);
nlohmann::ordered_json prediction_json(const predict::PlanPrediction& p);

}  // namespace mfsdp::cli
