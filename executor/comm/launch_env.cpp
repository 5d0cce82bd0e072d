// LaunchEnv::from_environment: torchrun's environment contract, read without LibTorch.

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "executor/comm/launch_env.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char kLaunchHint[] =
    "launch with torchrun, or set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE";

std::optional<std::string> read_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string require_variable(const char* name) {
  std::optional<std::string> value = read_variable(name);
  if (!value) fail(ExitCode::kRuntime, std::string(name) + " is not set; " + kLaunchHint);
  if (value->empty()) fail(ExitCode::kRuntime, std::string(name) + " is empty; " + kLaunchHint);
  return *value;
}

int parse_int(const char* name, const std::string& text, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    fail(ExitCode::kRuntime, std::string(name) + "='" + text + "' is not an integer");
  }
  if (value < min || value > max) {
    fail(ExitCode::kRuntime, std::string(name) + "=" + text + " is out of range; expected " +
                                 std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

}  // namespace

LaunchEnv LaunchEnv::from_environment() {
  constexpr int kMaxInt = 1 << 30;
  LaunchEnv env;
  // WORLD_SIZE first: it is the variable whose absence says "not launched as a rank at all".
  env.world_size = parse_int("WORLD_SIZE", require_variable("WORLD_SIZE"), 1, kMaxInt);
  env.rank = parse_int("RANK", require_variable("RANK"), 0, env.world_size - 1);
  env.master_addr = require_variable("MASTER_ADDR");
  // Port 0 would let the host pick a port nobody else can know.
  env.master_port = parse_int("MASTER_PORT", require_variable("MASTER_PORT"), 1, 65535);

  // Single-node launches may leave out the local variables; then every rank is local.
  if (std::optional<std::string> text = read_variable("LOCAL_WORLD_SIZE")) {
    env.local_world_size = parse_int("LOCAL_WORLD_SIZE", *text, 1, env.world_size);
  } else {
    env.local_world_size = env.world_size;
  }
  if (std::optional<std::string> text = read_variable("LOCAL_RANK")) {
    env.local_rank = parse_int("LOCAL_RANK", *text, 0, env.local_world_size - 1);
  } else if (env.local_world_size == env.world_size) {
    env.local_rank = env.rank;
  } else {
    fail(ExitCode::kRuntime, "LOCAL_RANK is not set but LOCAL_WORLD_SIZE is; set both or neither");
  }

  if (std::optional<std::string> text = read_variable("MFSDP_AGENT_STORE")) {
    if (*text == "1") {
      env.agent_store = true;
    } else if (*text == "0" || text->empty()) {
      env.agent_store = false;
    } else {
      fail(ExitCode::kRuntime, "MFSDP_AGENT_STORE='" + *text + "' must be 0 or 1");
    }
  }
  // torchrun writes Python's str(bool).
  if (std::optional<std::string> text = read_variable("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*text == "True" || *text == "true" || *text == "1") {
      env.torchrun_store = true;
    } else if (!(*text == "False" || *text == "false" || *text == "0" || text->empty())) {
      fail(ExitCode::kRuntime,
           "TORCHELASTIC_USE_AGENT_STORE='" + *text + "' must be True or False");
    }
  }
  if (std::optional<std::string> text = read_variable("TORCHELASTIC_RUN_ID")) {
    env.torchrun_run_id = *text;
  }
  if (std::optional<std::string> text = read_variable("TORCHELASTIC_RESTART_COUNT")) {
    env.restart_count = parse_int("TORCHELASTIC_RESTART_COUNT", *text, 0, kMaxInt);
  }
  if (std::optional<std::string> text = read_variable("MFSDP_RDZV_BIND")) env.bind_addr = *text;

  // A rank alone needs no secret from anyone: its store admits only itself.
  if (std::optional<std::string> secret = rendezvous_secret_from_environment()) {
    env.secret = *secret;
  } else if (env.world_size == 1) {
    env.secret = new_rendezvous_secret();
  } else {
    fail(ExitCode::kUsage,
         "MFSDP_RDZV_SECRET is not set; ranks that another launcher starts (torchrun, srun, "
         "mpirun) must share a secret: export MFSDP_RDZV_SECRET=$(openssl rand -hex 32) on "
         "every node, with the same value, before starting them (docs/launch.md, Security)");
  }
  return env;
}

}  // namespace mfsdp::executor
