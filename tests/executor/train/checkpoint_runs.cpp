#include "tests/executor/train/checkpoint_runs.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <gtest/gtest.h>

#include "executor/comm/rendezvous.h"
#include "planner/sharding_scope.h"
#include "schema/plan_json.h"
#include "tests/executor/parity/parity_config.h"

namespace mfsdp::testing {

using namespace std::chrono_literals;

std::string fresh_dir(const std::string& name) {
  const std::string dir = (std::filesystem::path(::testing::TempDir()) /
                           ("ckpt_" + name + "_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string plan_tied_lm(const std::string& dir, const std::string& name, int world, int prefetch) {
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("tied_lm.pt"));
  schema::Policy policy;
  policy.forward_prefetch = policy.backward_prefetch = prefetch;
  planner::ShardingScope scope(model, {world, world, 1}, policy);
  for (const char* unit : {"layers.0", "layers.1", "<root>"}) scope.fully_shard(unit);
  const std::string path = dir + "/" + name;
  schema::write_file_atomically(path, schema::dump_plan(scope.finalize()));
  return path;
}

std::vector<RankResult> run_workers(const WorkerRun& run) {
  executor::StoreHost host(0);
  RankLaunch launch;
  launch.program = MFSDP_CHECKPOINT_WORKER;
  launch.args = {run.plan, fixture_path("tied_lm.pt"), std::to_string(run.steps), run.out};
  if (run.save_every > 0) {
    launch.args.insert(launch.args.end(),
                       {"--dir", run.dir, "--save-every", std::to_string(run.save_every), "--keep",
                        std::to_string(run.keep)});
  }
  if (!run.resume.empty()) launch.args.insert(launch.args.end(), {"--resume", run.resume});
  if (run.reseed) launch.args.push_back("--reseed");
  launch.world_size = run.world;
  launch.master_port = host.port();
  launch.secret = host.secret();
  launch.agent_store = true;
  launch.limit = 120s;
  return run_ranks(launch);
}

std::string trained_checkpoint(const std::string& dir, int steps,
                               std::map<std::string, at::Tensor>* params) {
  WorkerRun run;
  run.plan = plan_tied_lm(dir, "plan.json", 2);
  run.steps = steps;
  run.out = dir + "/trained.pt";
  run.dir = dir + "/ckpt";
  run.save_every = steps;
  const std::vector<RankResult> ranks = run_workers(run);
  for (const auto& r : ranks) EXPECT_EQ(r.exit_code, 0) << describe(ranks);
  if (params) {
    std::vector<double> losses;
    load_parity_result(run.out, *params, losses);
  }
  char name[32];
  std::snprintf(name, sizeof name, "/step-%08d", steps);
  return run.dir + name;
}

size_t line_count(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace mfsdp::testing
