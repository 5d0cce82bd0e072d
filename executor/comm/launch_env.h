#pragma once
// A rank's launch environment: torchrun's variables (MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_*), mfsdp's own (MFSDP_AGENT_STORE,
// MFSDP_RDZV_BIND) and the rendezvous secret (docs/launch.md). Defined in launch_env.cpp and
// rendezvous_secret.cpp; no LibTorch, no Gloo.

#include <cstddef>
#include <optional>
#include <string>

namespace mfsdp::executor {

struct LaunchEnv {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  bool agent_store = false;  // mfsdp's launcher hosts the store
  // torchrun's agent hosts a c10d store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE)
  bool torchrun_store = false;
  std::string torchrun_run_id;  // TORCHELASTIC_RUN_ID
  int restart_count = 0;        // TORCHELASTIC_RESTART_COUNT: how often torchrun restarted us
  std::string secret;           // what every rank and the store prove to each other
  std::string bind_addr;        // where rank 0's store listens; empty: MASTER_ADDR

  // Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  // TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
  // MFSDP_AGENT_STORE and MFSDP_RDZV_BIND, and the secret (rendezvous_secret_from_environment;
  // a world of one rank makes up its own). Throws Error(kRuntime) naming the missing or
  // malformed variable, Error(kUsage) for a missing or unusable secret.
  static LaunchEnv from_environment();
};

// The shortest secret accepted, in bytes.
constexpr size_t kMinSecretBytes = 16;

// A fresh secret for one run: 32 random bytes as 64 hex digits.
std::string new_rendezvous_secret();

// The secret this process was given: MFSDP_RDZV_SECRET, or the first line of the file
// MFSDP_RDZV_SECRET_FILE names; std::nullopt when neither is set. Throws Error(kUsage) when
// both are set, the secret is shorter than kMinSecretBytes, or the file cannot be read or
// other users may read it.
std::optional<std::string> rendezvous_secret_from_environment();

}  // namespace mfsdp::executor
