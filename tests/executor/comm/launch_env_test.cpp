#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "executor/comm/launch_env.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Sets the launch variables for one test and restores the process environment afterwards.
class LaunchEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"MASTER_ADDR",
                                           "MASTER_PORT",
                                           "RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MFSDP_AGENT_STORE",
                                           "MFSDP_RDZV_SECRET",
                                           "MFSDP_RDZV_SECRET_FILE",
                                           "MFSDP_RDZV_BIND",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "TORCHELASTIC_RUN_ID",
                                           "TORCHELASTIC_RESTART_COUNT"};

  void SetUp() override {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name);
    }
    set("MASTER_ADDR", "10.0.0.7");
    set("MASTER_PORT", "29511");
    set("RANK", "3");
    set("WORLD_SIZE", "8");
    set("MFSDP_RDZV_SECRET", kSecret);
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void set(const char* name, const char* value) { setenv(name, value, 1); }

  static constexpr const char* kSecret = "0123456789abcdef0123";

  std::string error_of_from_environment(ExitCode expected = ExitCode::kRuntime) {
    try {
      LaunchEnv::from_environment();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), expected);
      return e.what();
    }
    ADD_FAILURE() << "from_environment did not throw";
    return "";
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchEnvTest, ReadsTorchrunVariables) {
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "4");
  set("MFSDP_AGENT_STORE", "1");
  const LaunchEnv env = LaunchEnv::from_environment();
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29511);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.secret, kSecret);
  EXPECT_EQ(env.bind_addr, "");
}

TEST_F(LaunchEnvTest, WithoutLocalVariablesEveryRankIsLocal) {
  const LaunchEnv env = LaunchEnv::from_environment();
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_world_size, 8);
  EXPECT_FALSE(env.agent_store);
}

TEST_F(LaunchEnvTest, MissingWorldSizeExplainsHowToLaunch) {
  unsetenv("WORLD_SIZE");
  EXPECT_EQ(error_of_from_environment(),
            "WORLD_SIZE is not set; launch with torchrun, or set MASTER_ADDR, MASTER_PORT, "
            "RANK, WORLD_SIZE");
}

TEST_F(LaunchEnvTest, MissingMasterAddrIsNamed) {
  unsetenv("MASTER_ADDR");
  EXPECT_EQ(error_of_from_environment().rfind("MASTER_ADDR is not set; launch with", 0), 0u);
}

TEST_F(LaunchEnvTest, RejectsMalformedNumbers) {
  set("RANK", "three");
  EXPECT_EQ(error_of_from_environment(), "RANK='three' is not an integer");
  set("RANK", "3");
  set("MASTER_PORT", "29511x");
  EXPECT_EQ(error_of_from_environment(), "MASTER_PORT='29511x' is not an integer");
}

TEST_F(LaunchEnvTest, RejectsOutOfRangeValues) {
  set("RANK", "8");
  EXPECT_EQ(error_of_from_environment(), "RANK=8 is out of range; expected 0..7");
  set("RANK", "0");
  set("MASTER_PORT", "0");
  EXPECT_EQ(error_of_from_environment(), "MASTER_PORT=0 is out of range; expected 1..65535");
  set("MASTER_PORT", "29511");
  set("LOCAL_WORLD_SIZE", "2");
  set("LOCAL_RANK", "2");
  EXPECT_EQ(error_of_from_environment(), "LOCAL_RANK=2 is out of range; expected 0..1");
}

TEST_F(LaunchEnvTest, RejectsAgentStoreFlagOtherThanZeroOrOne) {
  set("MFSDP_AGENT_STORE", "yes");
  EXPECT_EQ(error_of_from_environment(), "MFSDP_AGENT_STORE='yes' must be 0 or 1");
}

TEST_F(LaunchEnvTest, ReadsTorchrunsAgentStoreRunIdAndRestartCount) {
  EXPECT_FALSE(LaunchEnv::from_environment().torchrun_store);
  set("TORCHELASTIC_USE_AGENT_STORE", "True");  // Python's str(True), as torchrun writes it
  set("TORCHELASTIC_RUN_ID", "job-42");
  set("TORCHELASTIC_RESTART_COUNT", "3");
  const LaunchEnv env = LaunchEnv::from_environment();
  EXPECT_TRUE(env.torchrun_store);
  EXPECT_FALSE(env.agent_store);
  EXPECT_EQ(env.torchrun_run_id, "job-42");
  EXPECT_EQ(env.restart_count, 3);
  set("TORCHELASTIC_USE_AGENT_STORE", "False");  // torch 1.13's c10d rendezvous
  EXPECT_FALSE(LaunchEnv::from_environment().torchrun_store);
}

TEST_F(LaunchEnvTest, RejectsMalformedTorchrunVariables) {
  set("TORCHELASTIC_USE_AGENT_STORE", "yes");
  EXPECT_EQ(error_of_from_environment(),
            "TORCHELASTIC_USE_AGENT_STORE='yes' must be True or False");
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set("TORCHELASTIC_RESTART_COUNT", "-1");
  EXPECT_EQ(error_of_from_environment().rfind("TORCHELASTIC_RESTART_COUNT=-1 is out of range", 0),
            0u);
}

TEST_F(LaunchEnvTest, ManyRanksWithoutASecretAreToldHowToShareOne) {
  unsetenv("MFSDP_RDZV_SECRET");
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET is not set; ranks that another launcher starts (torchrun, srun, "
            "mpirun) must share a secret: export MFSDP_RDZV_SECRET=$(openssl rand -hex 32) on "
            "every node, with the same value, before starting them (docs/launch.md, Security)");
}

TEST_F(LaunchEnvTest, ARankAloneMakesUpItsOwnSecret) {
  unsetenv("MFSDP_RDZV_SECRET");
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  const std::string first = LaunchEnv::from_environment().secret;
  EXPECT_EQ(first.size(), 64u);
  EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(LaunchEnv::from_environment().secret, first);
}

TEST_F(LaunchEnvTest, RejectsAShortSecretAndBothSources) {
  set("MFSDP_RDZV_SECRET", "hunter2");
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET is 7 bytes; a rendezvous secret needs at least 16 random ones, "
            "e.g. export MFSDP_RDZV_SECRET=$(openssl rand -hex 32)");
  set("MFSDP_RDZV_SECRET", kSecret);
  set("MFSDP_RDZV_SECRET_FILE", "/nonexistent");
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "both MFSDP_RDZV_SECRET and MFSDP_RDZV_SECRET_FILE are set; unset one");
}

TEST_F(LaunchEnvTest, ReadsTheSecretFromAFileOnlyItsOwnerCanRead) {
  unsetenv("MFSDP_RDZV_SECRET");
  const std::string path = ::testing::TempDir() + "launch_env_secret";
  {
    std::ofstream out(path);
    out << "a secret from a file, long enough\n";
  }
  set("MFSDP_RDZV_SECRET_FILE", path.c_str());
  chmod(path.c_str(), 0644);
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET_FILE=" + path +
                " may be read by other users; make it private with chmod 600 " + path);
  chmod(path.c_str(), 0600);
  EXPECT_EQ(LaunchEnv::from_environment().secret, "a secret from a file, long enough");
  std::remove(path.c_str());
}

TEST_F(LaunchEnvTest, RefusesASecretFileThatIsALinkOrNotARegularFile) {
  unsetenv("MFSDP_RDZV_SECRET");
  const std::string path = ::testing::TempDir() + "launch_env_secret_target";
  const std::string link = ::testing::TempDir() + "launch_env_secret_link";
  const std::string fifo = ::testing::TempDir() + "launch_env_secret_fifo";
  std::remove(path.c_str());
  std::remove(link.c_str());
  std::remove(fifo.c_str());
  {
    std::ofstream out(path);
    out << "a secret from a file, long enough\n";
  }
  chmod(path.c_str(), 0600);
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  // A link is refused even to a private file of this user: whoever can replace the link
  // chooses the secret.
  set("MFSDP_RDZV_SECRET_FILE", link.c_str());
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET_FILE=" + link +
                " is a symbolic link; point MFSDP_RDZV_SECRET_FILE at the file itself");

  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  set("MFSDP_RDZV_SECRET_FILE", fifo.c_str());  // opened without blocking, then refused
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET_FILE=" + fifo + " is not a regular file");

  set("MFSDP_RDZV_SECRET_FILE", path.c_str());
  EXPECT_EQ(LaunchEnv::from_environment().secret, "a secret from a file, long enough");
  std::remove(path.c_str());
  std::remove(link.c_str());
  std::remove(fifo.c_str());
}

TEST_F(LaunchEnvTest, RefusesASecretFileOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  unsetenv("MFSDP_RDZV_SECRET");
  const std::string path = ::testing::TempDir() + "launch_env_secret_given_away";
  {
    std::ofstream out(path);
    out << "a secret from a file, long enough\n";
  }
  chmod(path.c_str(), 0600);
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  set("MFSDP_RDZV_SECRET_FILE", path.c_str());
  EXPECT_EQ(error_of_from_environment(ExitCode::kUsage),
            "MFSDP_RDZV_SECRET_FILE=" + path +
                " belongs to user 65534, not to this user (0); use a secret file of your own");
  std::remove(path.c_str());
}

TEST_F(LaunchEnvTest, ReadsWhereRankZeroListens) {
  set("MFSDP_RDZV_BIND", "0.0.0.0");
  EXPECT_EQ(LaunchEnv::from_environment().bind_addr, "0.0.0.0");
}

}  // namespace
}  // namespace mfsdp::executor
