#include "executor/launch/external_launch.h"

#include <gtest/gtest.h>

#include "schema/error.h"

namespace mfsdp::launch {
namespace {

// The message of the Error that external_worker_env throws, or "" when it throws none.
std::string rejection(const Environment& env, const std::string& addr = {}, int port = 0) {
  try {
    external_worker_env(env, addr, port);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    return e.what();
  }
  return "";
}

TEST(ExternalLaunch, NoLauncherVariablesMeansNotLaunched) {
  EXPECT_EQ(external_worker_env({}), std::nullopt);
  EXPECT_EQ(external_worker_env({{"MASTER_ADDR", "node0"},
                                 {"MASTER_PORT", "29500"},
                                 {"LOCAL_RANK", "0"},
                                 {"SLURM_JOB_ID", "7"}}),
            std::nullopt);
}

TEST(ExternalLaunch, TorchrunVariablesPassThrough) {
  const Environment env = {{"RANK", "3"},         {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "1"},   {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1234"},
                           {"PATH", "/usr/bin"}};
  EXPECT_EQ(external_worker_env(env), (Environment{{"RANK", "3"},
                                                   {"WORLD_SIZE", "4"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "2"},
                                                   {"MASTER_ADDR", "n0"},
                                                   {"MASTER_PORT", "1234"}}));
}

TEST(ExternalLaunch, TorchrunWithoutLocalVariablesIsOneNode) {
  const auto vars = external_worker_env(
      {{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(vars);
  EXPECT_EQ(vars->at("LOCAL_RANK"), "2");
  EXPECT_EQ(vars->at("LOCAL_WORLD_SIZE"), "3");
}

TEST(ExternalLaunch, FlagsWinOverMasterVariables) {
  const auto vars = external_worker_env(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1234"}}, "n9",
      4321);
  ASSERT_TRUE(vars);
  EXPECT_EQ(vars->at("MASTER_ADDR"), "n9");
  EXPECT_EQ(vars->at("MASTER_PORT"), "4321");
}

TEST(ExternalLaunch, RejectsPartialTorchrunVariables) {
  EXPECT_EQ(rejection({{"RANK", "0"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1"}}),
            "started by torchrun (RANK is set) but WORLD_SIZE is not set; set it, or unset RANK "
            "to let mfsdp run start the workers itself");
  EXPECT_EQ(rejection({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1"}}),
            "started by torchrun (WORLD_SIZE is set) but RANK is not set; set it, or unset "
            "WORLD_SIZE to let mfsdp run start the workers itself");
  EXPECT_EQ(rejection({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
            "started by torchrun (RANK is set) but MASTER_ADDR is not set; set it or pass "
            "--master-addr");
  EXPECT_EQ(rejection({{"RANK", "0"},
                       {"WORLD_SIZE", "4"},
                       {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "n0"},
                       {"MASTER_PORT", "1"}}),
            "started by torchrun (LOCAL_WORLD_SIZE is set) but LOCAL_RANK is not set; set it, or "
            "unset LOCAL_WORLD_SIZE to let mfsdp run start the workers itself");
}

TEST(ExternalLaunch, RejectsMalformedValues) {
  const Environment base = {{"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1234"}};
  Environment env = base;
  env.insert({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(rejection(env), "RANK=4 is out of range; expected 0..3");
  env = base;
  env.insert({{"RANK", "one"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(rejection(env), "RANK='one' is not an integer; torchrun should set it to a number");
  env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "0"}};
  EXPECT_EQ(rejection(env), "MASTER_PORT=0 is out of range; expected 1..65535");
}

Environment srun_task(int procid, int ntasks, int localid) {
  return {{"SLURM_JOB_ID", "77"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NTASKS", std::to_string(ntasks)},
          {"SLURM_LOCALID", std::to_string(localid)}};
}

TEST(ExternalLaunch, SrunTaskBecomesTheRankSlurmGaveIt) {
  Environment env = srun_task(5, 8, 1);
  env.insert({{"SLURM_NODEID", "1"},
              {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
              {"MASTER_ADDR", "node0"},
              {"MASTER_PORT", "29500"}});
  EXPECT_EQ(external_worker_env(env), (Environment{{"RANK", "5"},
                                                   {"WORLD_SIZE", "8"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "4"},
                                                   {"MASTER_ADDR", "node0"},
                                                   {"MASTER_PORT", "29500"}}));
}

TEST(ExternalLaunch, SrunTasksPerNodeMayDifferBetweenNodes) {
  for (const auto& [node, tasks] :
       std::vector<std::pair<int, std::string>>{{0, "3"}, {1, "2"}, {2, "2"}, {3, "1"}}) {
    Environment env = srun_task(0, 8, 0);
    env.insert(
        {{"SLURM_NODEID", std::to_string(node)}, {"SLURM_STEP_TASKS_PER_NODE", "3,2(x2),1"}});
    const auto vars = external_worker_env(env, "node0", 29500);
    ASSERT_TRUE(vars);
    EXPECT_EQ(vars->at("LOCAL_WORLD_SIZE"), tasks) << "node " << node;
  }
  Environment env = srun_task(0, 8, 0);
  env.insert({{"SLURM_NODEID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "3(2)"}});
  EXPECT_EQ(rejection(env, "node0", 29500),
            "SLURM_STEP_TASKS_PER_NODE='3(2)' is not a Slurm task count list like 4(x2),3");
}

TEST(ExternalLaunch, SrunTaskWithoutTasksPerNodeLeavesLocalWorldSizeOut) {
  const auto vars = external_worker_env(srun_task(1, 2, 1), "node0", 29500);
  ASSERT_TRUE(vars);
  EXPECT_EQ(vars->count("LOCAL_WORLD_SIZE"), 0u);
  EXPECT_EQ(vars->at("RANK"), "1");
  EXPECT_EQ(vars->at("LOCAL_RANK"), "1");
}

TEST(ExternalLaunch, SrunNeedsTheMasterAddressAndPort) {
  EXPECT_EQ(rejection(srun_task(0, 2, 0)),
            "started by srun (SLURM_PROCID is set) but MASTER_ADDR is not set; export it in the "
            "job script (the host of rank 0) or pass --master-addr");
  EXPECT_EQ(rejection(srun_task(0, 2, 0), "node0"),
            "started by srun (SLURM_PROCID is set) but MASTER_PORT is not set; export it in the "
            "job script (the host of rank 0) or pass --master-port");
  const auto vars = external_worker_env(srun_task(0, 2, 0), "node0", 29500);
  ASSERT_TRUE(vars);
  EXPECT_EQ(vars->at("MASTER_ADDR"), "node0");
  EXPECT_EQ(vars->at("MASTER_PORT"), "29500");
}

TEST(ExternalLaunch, RejectsPartialSrunVariables) {
  Environment env = srun_task(0, 2, 0);
  env.erase("SLURM_NTASKS");
  EXPECT_EQ(rejection(env, "node0", 29500),
            "started by srun (SLURM_STEP_ID is set) but SLURM_NTASKS is not set; set it, or "
            "unset SLURM_STEP_ID to let mfsdp run start the workers itself");
  env = srun_task(0, 2, 0);
  env.erase("SLURM_LOCALID");
  EXPECT_EQ(rejection(env, "node0", 29500),
            "started by srun (SLURM_STEP_ID is set) but SLURM_LOCALID is not set; set it, or "
            "unset SLURM_STEP_ID to let mfsdp run start the workers itself");
}

TEST(ExternalLaunch, SbatchScriptAndSingleTaskStepsAreNotLaunches) {
  Environment batch_script = srun_task(0, 4, 0);
  batch_script.erase("SLURM_STEP_ID");
  EXPECT_EQ(external_worker_env(batch_script, "node0", 29500), std::nullopt);
  EXPECT_EQ(external_worker_env(srun_task(0, 1, 0), "node0", 29500), std::nullopt);
}

Environment mpirun_process(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"}};
}

TEST(ExternalLaunch, MpirunProcessBecomesTheRankOpenMpiGaveIt) {
  EXPECT_EQ(external_worker_env(mpirun_process(3, 4, 1, 2)),
            (Environment{{"RANK", "3"},
                         {"WORLD_SIZE", "4"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "node0"},
                         {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(external_worker_env(mpirun_process(0, 1, 0, 1)), std::nullopt);
}

TEST(ExternalLaunch, RejectsPartialOpenMpiVariables) {
  Environment env = mpirun_process(3, 4, 1, 2);
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(rejection(env),
            "started by mpirun (OMPI_COMM_WORLD_RANK is set) but OMPI_COMM_WORLD_LOCAL_SIZE is "
            "not set; set it, or unset OMPI_COMM_WORLD_RANK to let mfsdp run start the workers "
            "itself");
  env = mpirun_process(3, 4, 2, 2);
  EXPECT_EQ(rejection(env), "OMPI_COMM_WORLD_LOCAL_RANK=2 is out of range; expected 0..1");
}

TEST(ExternalLaunch, TorchrunWinsOverTheLaunchersAroundIt) {
  Environment env = srun_task(1, 2, 1);
  env.insert({{"OMPI_COMM_WORLD_RANK", "1"},
              {"RANK", "0"},
              {"WORLD_SIZE", "1"},
              {"MASTER_ADDR", "localhost"},
              {"MASTER_PORT", "29400"}});
  const auto vars = external_worker_env(env);
  ASSERT_TRUE(vars);
  EXPECT_EQ(vars->at("RANK"), "0");
  EXPECT_EQ(vars->at("WORLD_SIZE"), "1");
}

TEST(ExternalLaunch, CurrentEnvironmentHasThisProcesssVariables) {
  setenv("MFSDP_LAUNCH_TEST_VARIABLE", "a=b", 1);
  EXPECT_EQ(current_environment().at("MFSDP_LAUNCH_TEST_VARIABLE"), "a=b");
}

}  // namespace
}  // namespace mfsdp::launch
