// `mfsdp show --predict` and `mfsdp diff --profile` as a user runs them: a plan traced by the
// real binary, a profile written by hand, and the prediction's figures checked against the
// plan's own trace times and the profile's costs.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

using nlohmann::json;

// A file of this process: ctest runs the tests of this binary in processes of their own, at
// the same time, and a file they shared could be rewritten while another reads it.
std::string own_path(const std::string& name) {
  return temp_path(std::to_string(::getpid()) + "." + name);
}

// tied_lm traced on batches of 2, planned for 2 ranks (once per process).
const std::string& traced_plan() {
  static const std::string path = [] {
    const std::string p = own_path("predict.tied_lm.plan.json");
    const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit",
                               "layers.*", "--unit", "<root>", "--trace-input", "2x16:int64",
                               "--trace-repeats", "1", "-o", p, "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

// All-gathers 100 us + 1 us per KB, reduce-scatters 50 us + 1 us per 2 KB, AdamW 2 ns an
// element, no contention.
std::string profile_file() {
  const std::string path = own_path("predict.profile.json");
  std::ofstream(path) << R"({"schema": "mfsdp.profile/1", "name": "hand", "description": "test",
    "backend": "gloo", "device": "cpu", "collectives": [
      {"kind": "all_gather", "world_size": 2, "latency_us": 100, "bytes_per_us": 1000},
      {"kind": "reduce_scatter", "world_size": 2, "latency_us": 50, "bytes_per_us": 2000},
      {"kind": "all_reduce", "world_size": 2, "latency_us": 70, "bytes_per_us": 500}],
    "compute": {"reference_gflops": 100, "optimizer_ns_per_element": {"adamw": 2}}})";
  return path;
}

TEST(PredictCli, ShowPredictCountsTheTracesTimesAndTheProfilesCosts) {
  const RunResult r = mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(),
                             "--compute-scale", "1", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json p = json::parse(r.out);
  const json plan = json::parse(read_file(traced_plan()));
  // Compute: every unit's forward split and backward, the loss, and AdamW over the shards.
  double ms = plan["trace"]["loss_ms"].get<double>();
  for (const json& t : plan["trace"]["times"]) {
    ms += t["pre_forward_ms"].get<double>() + t["post_forward_ms"].get<double>() +
          t["backward_ms"].get<double>();
  }
  int64_t elements = 0;
  for (const json& unit : plan["units"]) {
    for (const json& group : unit["groups"]) elements += group["shard_numel"].get<int64_t>();
  }
  ms += 2.0 * static_cast<double>(elements) / 1e6;
  EXPECT_NEAR(p["compute_ms"].get<double>(), ms, 1e-9);
  EXPECT_NEAR(p["step_ms"].get<double>(),
              p["compute_ms"].get<double>() + p["exposed_comm_ms"].get<double>() +
                  p["contention_ms"].get<double>(),
              1e-9);
  // The all-gather of <root>, issued first with nothing to hide it: 100 us + bytes / 1000.
  const double root_gather = 0.1 + plan["units"][0]["unsharded_bytes"].get<double>() / 1e6;
  EXPECT_NEAR(p["timeline"][0]["end_us"].get<double>() / 1000, root_gather, 1e-9);
  EXPECT_EQ(p["timeline"][0]["name"], "all-gather of <root>");
  EXPECT_GE(p["exposed_comm_ms"].get<double>(), root_gather - 1e-9);
  EXPECT_EQ(p["microbatch_samples"], 2);
  ASSERT_EQ(p["units"].size(), 3u);
}

TEST(PredictCli, ShowPredictReadsARunsMetricsAndReportsTheError) {
  // Two ranks, three steps: the first warms up; the slowest rank's 40 and 60 ms give 50.
  const std::string metrics = temp_path("predict.metrics.jsonl");
  std::ofstream(metrics) << R"({"step":1,"rank":0,"step_ms":900,"exposed_comm_ms":1}
{"step":1,"rank":1,"step_ms":800,"exposed_comm_ms":2}
{"step":2,"rank":0,"step_ms":40,"exposed_comm_ms":3}
{"step":2,"rank":1,"step_ms":30,"exposed_comm_ms":4}
{"step":3,"rank":0,"step_ms":50,"exposed_comm_ms":5}
{"step":3,"rank":1,"step_ms":60,"exposed_comm_ms":6}
{"rank":0,"memory":{}}
)";
  const RunResult r = mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(),
                             "--metrics", metrics, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json p = json::parse(r.out);
  EXPECT_EQ(p["measured"]["step_ms"], 50);
  EXPECT_EQ(p["measured"]["exposed_comm_ms"], 4.5);  // the median of 3, 4, 5, 6
  EXPECT_EQ(p["measured"]["steps"], 2);
  const RunResult text = mfsdp(
      {"show", traced_plan(), "--predict", "--profile", profile_file(), "--metrics", metrics});
  EXPECT_NE(text.out.find("measured      step 50.00 ms (median of 2 steps after the first, "
                          "slowest of 2 ranks)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("critical path"), std::string::npos) << text.out;
}

// --calibrate fits the profile to what a run measured: predicted on the profile it writes,
// the plan's step and exposed communication are the run's.
TEST(PredictCli, CalibrateFitsTheProfileToARunsStepAndExposedTime) {
  const RunResult plain =
      mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(), "--format", "json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const double step = json::parse(plain.out)["step_ms"].get<double>();
  const double exposed = json::parse(plain.out)["exposed_comm_ms"].get<double>();
  // A run 1.8 times as long, waiting 2.5 times as long for its collectives.
  const std::string metrics = own_path("calibrate.metrics.jsonl");
  std::ofstream out(metrics);
  for (int s = 1; s <= 3; ++s) {
    for (int rank = 0; rank < 2; ++rank) {
      out << json{{"step", s},
                  {"rank", rank},
                  {"step_ms", 1.8 * step},
                  {"exposed_comm_ms", 2.5 * exposed}}
                 .dump()
          << "\n";
    }
  }
  out.close();
  const std::string calibrated = own_path("calibrated.profile.json");
  const RunResult r = mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(),
                             "--metrics", metrics, "--calibrate", calibrated});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("calibrated    compute x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profile written to " + calibrated), std::string::npos) << r.out;
  const json profile = json::parse(read_file(calibrated));
  EXPECT_EQ(profile["calibration"]["metrics"], metrics);
  EXPECT_GT(profile["calibration"]["collective_factor"].get<double>(), 1);
  EXPECT_GT(profile["compute"]["run_factor"].get<double>(), 1);
  const RunResult again =
      mfsdp({"show", traced_plan(), "--predict", "--profile", calibrated, "--format", "json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NEAR(json::parse(again.out)["step_ms"].get<double>(), 1.8 * step, 0.01 * step);
  EXPECT_NEAR(json::parse(again.out)["exposed_comm_ms"].get<double>(), 2.5 * exposed,
              0.01 * exposed + 0.001);

  const auto refused = [](const std::vector<std::string>& args, const std::string& text) {
    const RunResult bad = mfsdp(args);
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_NE(bad.err.find(text), std::string::npos) << bad.err;
  };
  refused(
      {"show", traced_plan(), "--predict", "--profile", profile_file(), "--calibrate", calibrated},
      "--calibrate fits the profile to a run: give that run's --metrics file too");
  // A profile that cannot be written: exit 5, one line, nothing printed as if it were done.
  const RunResult unwritable =
      mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(), "--metrics", metrics,
             "--calibrate", "/nonexistent-directory/calibrated.json"});
  EXPECT_EQ(unwritable.exit_code, 5) << unwritable.err;
  EXPECT_NE(unwritable.err.find("cannot write /nonexistent-directory/calibrated.json"),
            std::string::npos)
      << unwritable.err;
  EXPECT_EQ(unwritable.out.find("profile written to"), std::string::npos) << unwritable.out;
  const std::string waiting = own_path("calibrate.waiting.jsonl");
  std::ofstream(waiting) << R"({"step":1,"rank":0,"step_ms":5,"exposed_comm_ms":5}
{"step":2,"rank":0,"step_ms":5,"exposed_comm_ms":5}
)";
  refused({"show", traced_plan(), "--predict", "--profile", profile_file(), "--metrics", waiting,
           "--calibrate", calibrated},
          "is not longer than its exposed communication");
}

TEST(PredictCli, DiffWithAProfileAddsThePredictedStepOfBothPlans) {
  const std::string deeper = temp_path("predict.tied_lm.prefetch2.plan.json");
  ASSERT_EQ(mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
                   "--unit", "<root>", "--trace-input", "2x16:int64", "--trace-repeats", "1",
                   "--prefetch", "0", "-o", deeper, "-q"})
                .exit_code,
            0);
  const RunResult j =
      mfsdp({"diff", traced_plan(), deeper, "--profile", profile_file(), "--format", "json"});
  EXPECT_EQ(j.exit_code, 1) << j.err;  // the plans differ
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["prediction"]["profile"], "hand");
  EXPECT_GT(doc["prediction"]["old_step_ms"].get<double>(), 0);
  EXPECT_GT(doc["prediction"]["new_step_ms"].get<double>(), 0);
  const RunResult text = mfsdp({"diff", traced_plan(), deeper, "--profile", profile_file()});
  EXPECT_NE(text.out.find("predicted step on profile 'hand': "), std::string::npos) << text.out;
}

// --memory-budget: the rank's terms add up to the plan's own memory section, and against a
// budget too small the report names the largest term and ways to fit that the plan's numbers
// bear out.
TEST(PredictCli, MemoryBudgetSaysWhichTermDoesNotFitAndWhatWould) {
  const auto show = [](const std::string& budget) {
    const RunResult r =
        mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(), "--compute-scale",
               "1", "--memory-budget", budget, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["memory"];
  };
  const json plan = json::parse(read_file(traced_plan()));
  const json& memory = plan["memory"];
  const json roomy = show("1GiB");
  const int64_t activations = roomy["activation_bytes"].get<int64_t>();
  EXPECT_EQ(activations, memory["activations"]["peak_bytes"].get<int64_t>());  // traced batch
  EXPECT_EQ(roomy["parameter_bytes"], memory["sharded_param_bytes"]);
  EXPECT_EQ(roomy["optimizer_state_bytes"].get<int64_t>(),
            2 * memory["sharded_grad_bytes"].get<int64_t>());  // adamw
  const int64_t total = roomy["total_bytes"].get<int64_t>();
  EXPECT_EQ(total, roomy["parameter_bytes"].get<int64_t>() +
                       roomy["gradient_bytes"].get<int64_t>() +
                       roomy["optimizer_state_bytes"].get<int64_t>() +
                       roomy["slot_bytes"].get<int64_t>() + activations);
  EXPECT_EQ(roomy["budget"]["fits"], true);

  // Half the activations over: at most 3 units' saved activations free it, and a microbatch
  // of 1 sample (the trace had 2) halves the activations.
  const int64_t budget = total - activations / 2;
  const json tight = show(std::to_string(budget) + "B");
  EXPECT_EQ(tight["budget"]["fits"], false);
  EXPECT_EQ(tight["budget"]["over_bytes"].get<int64_t>(), total - budget);
  EXPECT_EQ(tight["budget"]["largest_term"], "activations");
  EXPECT_EQ(tight["budget"]["uncheckpointed_units"], 3);
  EXPECT_EQ(tight["budget"]["microbatch_samples"], 1);
  // More ranks shrink the sharded terms only: the fewest (2 x a power of two) that fit.
  const int64_t sharded = roomy["parameter_bytes"].get<int64_t>() +
                          roomy["gradient_bytes"].get<int64_t>() +
                          roomy["optimizer_state_bytes"].get<int64_t>();
  const int64_t rest = total - sharded;
  int64_t ranks = 4;
  while (rest + sharded * 2 / ranks > budget && ranks < (int64_t{1} << 30)) ranks *= 2;
  EXPECT_EQ(tight["budget"]["shard_size"], ranks);
  // A budget below the slots and activations: no number of ranks fits.
  EXPECT_TRUE(show(std::to_string(rest - 1) + "B")["budget"]["shard_size"].is_null());

  const RunResult text =
      mfsdp({"show", traced_plan(), "--predict", "--profile", profile_file(), "--compute-scale",
             "1", "--memory-budget", std::to_string(budget) + "B"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* line :
       {"\nmemory        ", "\nbudget        ", "does not fit", "the largest term is activations",
        "to fit        more ranks: sharded over ", "to fit        checkpointing the 3 units",
        "to fit        a microbatch of 1 sample (--microbatch-size 1"}) {
    EXPECT_NE(text.out.find(line), std::string::npos) << line << " in\n" << text.out;
  }
}

TEST(PredictCli, RefusesWhatCannotBePredictedWithOneLine) {
  const auto refused = [](const std::vector<std::string>& args, const std::string& text) {
    const RunResult r = mfsdp(args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  refused({"show", traced_plan(), "--predict"}, "--predict needs --profile FILE|NAME");
  refused({"show", traced_plan(), "--profile", profile_file()}, "--profile is for --predict");
  refused({"show", traced_plan(), "--memory-budget", "80GiB"}, "--memory-budget is for --predict");
  refused({"show", "plans/tied_lm.plan.json", "--predict", "--profile", "h100-nvlink"},
          "the plan has no trace");
  refused({"show", traced_plan(), "--predict", "--profile", "a100"},
          "neither a profile file nor a built-in profile (a100-nvlink, h100-nvlink, h200-nvlink, "
          "b200-nvlink, ib-400g)");
  refused({"show", traced_plan(), "--predict", "--profile", profile_file(), "--compute-scale", "0"},
          "--compute-scale 0 is not a number > 0");
  refused({"diff", "plans/tied_lm.plan.json", traced_plan(), "--profile", profile_file()},
          "plans/tied_lm.plan.json: the plan has no trace");
}

}  // namespace
}  // namespace mfsdp::testing

namespace mfsdp::testing {
namespace {

std::vector<std::string> search_args(const std::string& out, std::vector<std::string> more) {
  std::vector<std::string> args = {"plan",
                                   "tests/fixtures/tied_lm.pt",
                                   "--world-size",
                                   "2",
                                   "--unit",
                                   "layers.*",
                                   "--unit",
                                   "<root>",
                                   "--trace-input",
                                   "2x16:int64",
                                   "--trace-repeats",
                                   "1",
                                   "-o",
                                   out};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double number_after(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  EXPECT_NE(at, std::string::npos) << marker << " in " << text;
  return at == std::string::npos ? -1 : std::stod(text.substr(at + marker.size()));
}

TEST(PlanSearchCli, OptimizeWritesTheFastestPlanItPredictedAndSaysWhatItGains) {
  const std::string out = temp_path("search.optimized.plan.json");
  const RunResult r = mfsdp(search_args(out, {"--optimize", "--profile", profile_file()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double chosen = number_after(r.err, ": predicted step ");
  const double yours =
      number_after(r.err, "  vs your plan (yours, prefetch 1, reshard, 2 streams): ");
  EXPECT_LE(chosen, yours * 1.01);
  EXPECT_NE(r.err.find("vs an FSDP2-like default (yours"), std::string::npos) << r.err;
  // The plan written carries its trace: predicting it again gives the step the search chose by.
  const RunResult again =
      mfsdp({"show", out, "--predict", "--profile", profile_file(), "--format", "json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NEAR(json::parse(again.out)["step_ms"].get<double>(), chosen, 0.005);
  EXPECT_EQ(mfsdp({"validate", out}).exit_code, 0);
}

TEST(PlanSearchCli, SweepPrintsEveryCandidateAndWritesYourPlan) {
  const std::string out = temp_path("search.sweep.plan.json");
  const RunResult r = mfsdp(
      search_args(out, {"--sweep", "--profile", profile_file(), "--sweep-world", "2,4", "-q"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("candidates (* on the Pareto front"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("yours, prefetch 1, reshard, 2 streams"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model only, prefetch"), std::string::npos) << r.out;
  // A unit per repeated block class: each MLP (and, apart, each attention) plus the model.
  EXPECT_NE(r.out.find("every MLP + model, prefetch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("every CausalSelfAttention + model, prefetch"), std::string::npos) << r.out;
  // Adjacent blocks merged: both blocks of this model as one unit, plus the model.
  EXPECT_NE(r.out.find("blocks merged in 2s + model, prefetch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("world sizes"), std::string::npos) << r.out;
  const json plan = json::parse(read_file(out));
  EXPECT_EQ(plan["policy"]["forward_prefetch"], 1);  // yours, as given
  EXPECT_EQ(plan["units"].size(), 3u);
}

TEST(PlanSearchCli, ABudgetNoPlanFitsFailsNamingTheSmallest) {
  const std::string out = temp_path("search.budget.plan.json");
  std::filesystem::remove(out);
  const RunResult r = mfsdp(
      search_args(out, {"--optimize", "--profile", profile_file(), "--memory-budget", "1KiB"}));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("no plan tried fits --memory-budget 1.0 KiB per rank; the smallest ("),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The memory column of a --sweep row, in bytes (to the 0.1 of a unit it prints).
double row_bytes(const std::string& row) {
  static const std::vector<std::pair<std::string, double>> units = {
      {" GiB", 1024.0 * 1024 * 1024}, {" MiB", 1024.0 * 1024}, {" KiB", 1024.0}};
  for (const auto& [unit, scale] : units) {
    const size_t at = row.find(unit);
    if (at == std::string::npos) continue;
    const size_t begin = row.rfind(' ', at - 1) + 1;
    return std::stod(row.substr(begin, at - begin)) * scale;
  }
  return -1;
}

// Checkpointing is a choice of the search: its plans hold less (the trace measures what each
// checkpointed block saves), so a budget between the smallest plan with and without it makes
// --optimize checkpoint.
TEST(PlanSearchCli, ABudgetOnlyCheckpointingMeetsChoosesCheckpointedBlocks) {
  const std::string out = own_path("search.checkpoint.plan.json");
  std::vector<std::string> args = {"plan",
                                   "tests/fixtures/tied_lm.pt",
                                   "--world-size",
                                   "2",
                                   "--auto",
                                   "--trace-input",
                                   "4x64:int64",
                                   "--trace-repeats",
                                   "1",
                                   "--profile",
                                   profile_file(),
                                   "-o",
                                   out};
  std::vector<std::string> sweep_args = args;
  sweep_args.insert(sweep_args.end(), {"--sweep", "-q"});
  const RunResult sweep = mfsdp(sweep_args);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  double with = -1, without = -1;
  std::istringstream rows(sweep.out);
  std::string row;
  bool kept_some = false;
  while (std::getline(rows, row)) {
    const double bytes = row_bytes(row);
    if (bytes < 0 || row.find(", prefetch ") == std::string::npos) continue;
    double& smallest = row.find("checkpointed") != std::string::npos ? with : without;
    if (smallest < 0 || bytes < smallest) smallest = bytes;
    if (row.find(", keep 2 of 3,") != std::string::npos) kept_some = true;
  }
  EXPECT_NE(sweep.out.find("blocks + model, every block checkpointed, prefetch 1, reshard"),
            std::string::npos)
      << sweep.out;
  EXPECT_TRUE(kept_some) << sweep.out;  // the last units of forward kept for backward
  ASSERT_GT(with, 0) << sweep.out;
  ASSERT_GT(without, with * 1.2) << sweep.out;

  args.insert(args.end(), {"--optimize", "--memory-budget",
                           std::to_string(static_cast<int64_t>((with + without) / 2))});
  const RunResult r = mfsdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("optimized: blocks + model, "), std::string::npos) << r.err;
  const json plan = json::parse(read_file(out));
  int checkpointed = 0;
  for (const json& u : plan["units"]) checkpointed += u.value("checkpoint", false) ? 1 : 0;
  EXPECT_GE(checkpointed, 1) << r.err;
}

// Without a trace there is nothing to predict a step from: --optimize keeps the plans that
// fit and writes the one with the fewest collectives, saying that activations are not
// counted.
TEST(PlanSearchCli, WithoutATraceOptimizeChoosesByMemoryAlone) {
  const std::string out = own_path("search.memory.plan.json");
  const std::vector<std::string> base = {"plan",         "tests/fixtures/tied_lm.pt",
                                         "--world-size", "2",
                                         "--unit",       "layers.*",
                                         "--unit",       "<root>",
                                         "-o",           out};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return mfsdp(args);
  };
  const RunResult refused = with({"--optimize"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--optimize without --trace-input chooses by memory alone and "
                             "needs --memory-budget"),
            std::string::npos)
      << refused.err;

  // Your plan's memory as a budget: only plans that hold no more fit.
  const RunResult sweep = with({"--sweep", "-q"});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_NE(sweep.out.find("no trace: memory without activations"), std::string::npos) << sweep.out;
  // The table marks a plan "chosen", but without --optimize the file holds yours: say so.
  const RunResult told = with({"--sweep"});
  ASSERT_EQ(told.exit_code, 0) << told.err;
  EXPECT_NE(told.err.find("the plan file holds yours (yours, "), std::string::npos) << told.err;
  const json yours = json::parse(read_file(out));
  const auto state_bytes = [](const json& p) {  // AdamW: params, grads, two moments, slots
    const json& m = p["memory"];
    return m["sharded_param_bytes"].get<int64_t>() + 3 * m["sharded_grad_bytes"].get<int64_t>() +
           m["slot_bytes"].get<int64_t>();
  };
  const auto gathers = [](const json& p) {
    size_t n = 0;
    for (const json& e : p["schedule"]) n += e.value("all_gather", json::array()).size();
    return n;
  };
  const RunResult tight =
      with({"--optimize", "--memory-budget", std::to_string(state_bytes(yours))});
  ASSERT_EQ(tight.exit_code, 0) << tight.err;
  EXPECT_NE(tight.err.find("optimized by memory alone (no trace): "), std::string::npos)
      << tight.err;
  EXPECT_NE(tight.err.find("activations are not counted"), std::string::npos) << tight.err;
  const json chosen = json::parse(read_file(out));
  EXPECT_LE(state_bytes(chosen), state_bytes(yours));
  EXPECT_LE(gathers(chosen), gathers(yours));

  // A generous budget: every unit kept from forward to backward, the fewest all-gathers of a
  // plan that can overlap them (the model as one unit cannot).
  const RunResult roomy = with({"--optimize", "--memory-budget", "1GiB"});
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_NE(roomy.err.find(", prefetch 1, keep, 2 streams: 6 collectives per microbatch"),
            std::string::npos)
      << roomy.err;
  const json kept = json::parse(read_file(out));
  EXPECT_EQ(kept["units"].size(), 3u);
  EXPECT_LT(gathers(kept), gathers(yours));
}

TEST(PlanSearchCli, RefusesASearchItCannotPredict) {
  const std::string out = temp_path("search.refused.plan.json");
  const auto refused = [&](std::vector<std::string> args, const std::string& text) {
    const RunResult r = mfsdp(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  };
  refused({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--optimize",
           "--profile", profile_file(), "-o", out},
          "--profile predicts the step from the unit times a trace measures; give --trace-input");
  refused(search_args(out, {"--optimize"}), "--optimize needs --profile FILE|NAME");
  refused({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--memory-budget",
           "1GiB", "-o", out},
          "--memory-budget is for --optimize or --sweep");
  refused(search_args(out, {"--memory-budget", "1GiB"}),
          "--memory-budget is for --optimize or --sweep");
  // Units that leave parameters out are refused as without --optimize, not searched around.
  const RunResult partial =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
             "--trace-input", "2x16:int64", "--trace-repeats", "1", "--optimize", "--profile",
             profile_file(), "-o", out});
  EXPECT_EQ(partial.exit_code, 4) << partial.err;
  EXPECT_NE(partial.err.find("mfsdp plan covers the whole model, but"), std::string::npos)
      << partial.err;
}

}  // namespace
}  // namespace mfsdp::testing

namespace mfsdp::testing {
namespace {

TEST(PlanPredictionCli, PlanWithAProfileRecordsThePredictedStep) {
  const std::string out = temp_path("prediction.plan.json");
  const RunResult r = mfsdp(search_args(
      out, {"--profile", profile_file(), "--microbatches", "2", "--compute-scale", "1", "-q"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json plan = json::parse(read_file(out));
  const json& p = plan["prediction"];
  EXPECT_EQ(p["profile"], "hand");
  EXPECT_EQ(p["microbatches"], 2);
  EXPECT_EQ(p["microbatch_samples"], 2);
  EXPECT_EQ(p["compute_scale"], 1.0);
  // As `show --predict` predicts the written plan, to the 0.001 ms the section keeps.
  const RunResult shown =
      mfsdp({"show", out, "--predict", "--profile", profile_file(), "--microbatches", "2",
             "--compute-scale", "1", "--format", "json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NEAR(p["step_ms"].get<double>(), json::parse(shown.out)["step_ms"].get<double>(), 0.002);
  EXPECT_GT(p["memory_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(mfsdp({"validate", out}).exit_code, 0);
  EXPECT_NE(mfsdp({"show", out}).out.find("\nprediction       step "), std::string::npos);
  // Predicted times follow measured ones: the diff ignores them unless asked.
  const std::string plain = temp_path("prediction.plain.plan.json");
  ASSERT_EQ(mfsdp(search_args(plain, {"-q"})).exit_code, 0);
  const RunResult ignored = mfsdp({"diff", plain, out, "--format", "json"});
  EXPECT_EQ(ignored.exit_code, 0) << ignored.out;
  const RunResult included = mfsdp({"diff", plain, out, "--include", "prediction"});
  EXPECT_EQ(included.exit_code, 1);
  EXPECT_NE(included.out.find("prediction"), std::string::npos) << included.out;
  // Prediction flags need a profile to predict with.
  const RunResult alone = mfsdp(search_args(plain, {"--microbatches", "2"}));
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--microbatches is for predicting the step; add --profile"),
            std::string::npos)
      << alone.err;
}

}  // namespace
}  // namespace mfsdp::testing
