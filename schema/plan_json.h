#pragma once
// Reading and writing plan files. Writing is byte-deterministic: fixed key order, two-space
// indent with arrays of scalars on one line, integers only (except the optional trace section's
// milliseconds and the optional training section's rates), trailing newline. Reading reports every
// problem with its JSON path.

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

nlohmann::ordered_json plan_to_json(const Plan& plan);
// The exact bytes of a plan file.
std::string dump_plan(const Plan& plan);

struct ParseResult {
  Plan plan;  // meaningful only when problems is empty
  std::vector<Problem>
      problems;  // e.g. {"units[3].groups[0].numel", "expected an integer, got a string"}
};
// Type/shape check of a JSON document against plan schema v1 and conversion to a Plan.
// Throws Error(kUsage) if `schema` is missing or names a version this build does not read
// (the message lists the supported versions); every other problem goes to `problems`.
ParseResult parse_plan(const nlohmann::json& doc);

// The training section alone: as written into a plan (present fields only, fixed key order),
// and read from a JSON object (an --training file, a scope file's "training"); problem paths
// start with `path`. Values are checked by check_training.
nlohmann::ordered_json training_to_json(const Training& training);
// The plan's `prediction` section.
nlohmann::ordered_json plan_prediction_json(const StepPrediction& prediction);
// A shape-only trace's work of one stretch, as the plan file holds it.
nlohmann::ordered_json work_to_json(const Work& work);
struct TrainingParse {
  Training training;
  std::vector<Problem> problems;
};
TrainingParse parse_training(const nlohmann::json& doc, const std::string& path);
// parse_training then check_training; throws Error(kUsage) "SOURCE: PATH: problem" on the
// first problem. `path` is where the object sits in its file ("training" in a scope file).
Training training_from_json(const nlohmann::json& doc, const std::string& source,
                            const std::string& path);

// Reads and parses a plan file. Throws Error(kUsage) when the file is missing, unreadable, empty or
// not JSON (one line: path, what, where); returns problems like parse_plan otherwise.
ParseResult read_plan_file(const std::string& path);

// Writes `text` to `path` atomically: a temp file in the same directory, fsync, rename.
// Throws Error(kIo) naming the path on failure; nothing is left behind.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace mfsdp::schema
