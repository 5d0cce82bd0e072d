#include "executor/launch/external_launch.h"

#include <charconv>
#include <vector>

#include "schema/error.h"

extern char** environ;

namespace mfsdp::launch {
namespace {

constexpr int kMaxInt = 1 << 30;  // what LaunchEnv accepts as a world size

// One launcher's variable names, and how to name the launcher in messages.
struct Launcher {
  const char* name;  // "torchrun"
  const char* rank;  // the variable whose presence says this launcher started us
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: derived otherwise
};

const Launcher kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
const Launcher kOpenMpi{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
const Launcher kSrun{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

class Reader {
 public:
  Reader(const Environment& env, const Launcher& launcher) : env_(env), launcher_(launcher) {}

  const std::string* find(const char* name) const {
    const auto it = env_.find(name);
    return it == env_.end() ? nullptr : &it->second;
  }

  std::string require(const char* name, const char* because) const {
    const std::string* value = find(name);
    if (value == nullptr || value->empty()) {
      fail(ExitCode::kUsage, std::string("started by ") + launcher_.name + " (" + because +
                                 " is set) but " + name + " is " + (value ? "empty" : "not set") +
                                 "; set it, or unset " + because +
                                 " to let mfsdp run start the workers itself");
    }
    return *value;
  }

  int integer(const char* name, const std::string& text, int min, int max) const {
    int value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, value);
    if (error != std::errc() || ptr != end) {
      fail(ExitCode::kUsage, std::string(name) + "='" + text + "' is not an integer; " +
                                 launcher_.name + " should set it to a number");
    }
    if (value < min || value > max) {
      fail(ExitCode::kUsage, std::string(name) + "=" + text + " is out of range; expected " +
                                 std::to_string(min) + ".." + std::to_string(max));
    }
    return value;
  }

  // Where rank 0 listens: the flags when given, else MASTER_ADDR / MASTER_PORT.
  void master(const std::string& flag_addr, int flag_port, Environment& out) const {
    const std::string fix = std::string(launcher_.name) == "torchrun"
                                ? "set it or pass "
                                : "export it in the job script (the host of rank 0) or pass ";
    out["MASTER_ADDR"] = flag_addr;
    if (flag_addr.empty()) {
      const std::string* addr = find("MASTER_ADDR");
      if (addr == nullptr || addr->empty()) {
        fail(ExitCode::kUsage, std::string("started by ") + launcher_.name + " (" + launcher_.rank +
                                   " is set) but MASTER_ADDR is not set; " + fix + "--master-addr");
      }
      out["MASTER_ADDR"] = *addr;
    }
    int port = flag_port;
    if (port <= 0) {
      const std::string* text = find("MASTER_PORT");
      if (text == nullptr || text->empty()) {
        fail(ExitCode::kUsage, std::string("started by ") + launcher_.name + " (" + launcher_.rank +
                                   " is set) but MASTER_PORT is not set; " + fix + "--master-port");
      }
      port = integer("MASTER_PORT", *text, 1, 65535);
    }
    out["MASTER_PORT"] = std::to_string(port);
  }

 private:
  const Environment& env_;
  const Launcher& launcher_;
};

// Slurm's tasks-per-node lists look like "4(x2),3": 4 tasks on nodes 0 and 1, 3 on node 2.
int tasks_on_node(const std::string& list, int node) {
  const std::string bad =
      "SLURM_STEP_TASKS_PER_NODE='" + list + "' is not a Slurm task count list like 4(x2),3";
  int first_node = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    int tasks = 0, repeat = 1;
    const char* end = item.data() + item.size();
    auto [ptr, error] = std::from_chars(item.data(), end, tasks);
    if (error != std::errc() || tasks < 1) fail(ExitCode::kUsage, bad);
    if (ptr != end) {
      if (end - ptr < 4 || ptr[0] != '(' || ptr[1] != 'x' || end[-1] != ')') {
        fail(ExitCode::kUsage, bad);
      }
      auto [rptr, rerror] = std::from_chars(ptr + 2, end - 1, repeat);
      if (rerror != std::errc() || rptr != end - 1 || repeat < 1) fail(ExitCode::kUsage, bad);
    }
    if (node < first_node + repeat) return tasks;
    first_node += repeat;
    start = comma + 1;
  }
  fail(ExitCode::kUsage, bad + ": it has no entry for SLURM_NODEID=" + std::to_string(node));
}

bool any_set(const Environment& env, const Launcher& launcher) {
  for (const char* name :
       {launcher.rank, launcher.size, launcher.local_rank, launcher.local_size}) {
    if (name != nullptr && env.count(name) != 0) return true;
  }
  return false;
}

// The torchrun variables a worker reads; LOCAL_WORLD_SIZE only when known.
void set_rank_vars(int rank, int size, int local_rank, std::optional<int> local_size,
                   Environment& out) {
  out["RANK"] = std::to_string(rank);
  out["WORLD_SIZE"] = std::to_string(size);
  out["LOCAL_RANK"] = std::to_string(local_rank);
  if (local_size) out["LOCAL_WORLD_SIZE"] = std::to_string(*local_size);
}

Environment from_torchrun(const Environment& env, const std::string& addr, int port) {
  const Reader read(env, kTorchrun);
  const char* trigger = env.count("RANK") ? "RANK" : "WORLD_SIZE";
  Environment out;
  const int size = read.integer("WORLD_SIZE", read.require("WORLD_SIZE", trigger), 1, kMaxInt);
  const int rank = read.integer("RANK", read.require("RANK", trigger), 0, size - 1);
  // As LaunchEnv: a single-node launch may leave out the local variables.
  int local_size = size;
  if (const std::string* text = read.find("LOCAL_WORLD_SIZE")) {
    local_size = read.integer("LOCAL_WORLD_SIZE", *text, 1, size);
  }
  int local_rank = rank;
  if (const std::string* text = read.find("LOCAL_RANK")) {
    local_rank = read.integer("LOCAL_RANK", *text, 0, local_size - 1);
  } else if (local_size != size) {
    read.require("LOCAL_RANK", "LOCAL_WORLD_SIZE");
  }
  set_rank_vars(rank, size, local_rank, local_size, out);
  read.master(addr, port, out);
  return out;
}

std::optional<Environment> from_open_mpi(const Environment& env, const std::string& addr,
                                         int port) {
  const Reader read(env, kOpenMpi);
  const char* trigger = kOpenMpi.rank;
  for (const char* name :
       {kOpenMpi.local_size, kOpenMpi.local_rank, kOpenMpi.size, kOpenMpi.rank}) {
    if (env.count(name)) trigger = name;  // the first one set, in the order of the message
  }
  const int size = read.integer(kOpenMpi.size, read.require(kOpenMpi.size, trigger), 1, kMaxInt);
  const int rank = read.integer(kOpenMpi.rank, read.require(kOpenMpi.rank, trigger), 0, size - 1);
  const int local_size =
      read.integer(kOpenMpi.local_size, read.require(kOpenMpi.local_size, trigger), 1, size);
  const int local_rank = read.integer(
      kOpenMpi.local_rank, read.require(kOpenMpi.local_rank, trigger), 0, local_size - 1);
  if (size == 1) return std::nullopt;
  Environment out;
  set_rank_vars(rank, size, local_rank, local_size, out);
  read.master(addr, port, out);
  return out;
}

std::optional<Environment> from_srun(const Environment& env, const std::string& addr, int port) {
  const Reader read(env, kSrun);
  const char* step = env.count("SLURM_STEP_ID") ? "SLURM_STEP_ID" : "SLURM_STEPID";
  const int size = read.integer(kSrun.size, read.require(kSrun.size, step), 1, kMaxInt);
  const int rank = read.integer(kSrun.rank, read.require(kSrun.rank, step), 0, size - 1);
  const int local_rank =
      read.integer(kSrun.local_rank, read.require(kSrun.local_rank, step), 0, size - 1);
  if (size == 1) return std::nullopt;
  Environment out;
  const std::string* per_node = read.find("SLURM_STEP_TASKS_PER_NODE");
  const std::string* node = read.find("SLURM_NODEID");
  std::optional<int> local_size;
  if (per_node != nullptr && node != nullptr) {
    local_size = tasks_on_node(*per_node, read.integer("SLURM_NODEID", *node, 0, kMaxInt));
  } else if (const std::string* text = read.find("SLURM_NTASKS_PER_NODE")) {
    local_size = read.integer("SLURM_NTASKS_PER_NODE", *text, 1, size);
  }
  if (local_size && local_rank >= *local_size) {
    fail(ExitCode::kUsage, "SLURM_LOCALID=" + std::to_string(local_rank) + " is out of range for " +
                               std::to_string(*local_size) + " tasks on this node; expected 0.." +
                               std::to_string(*local_size - 1));
  }
  set_rank_vars(rank, size, local_rank, local_size, out);
  read.master(addr, port, out);
  return out;
}

}  // namespace

Environment current_environment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) continue;
    env.emplace(entry.substr(0, equals), entry.substr(equals + 1));
  }
  return env;
}

std::optional<Environment> external_worker_env(const Environment& env,
                                               const std::string& master_addr, int master_port) {
  if (env.count("RANK") || env.count("WORLD_SIZE")) {
    return from_torchrun(env, master_addr, master_port);
  }
  if (any_set(env, kOpenMpi)) return from_open_mpi(env, master_addr, master_port);
  if ((env.count("SLURM_STEP_ID") || env.count("SLURM_STEPID")) && any_set(env, kSrun)) {
    return from_srun(env, master_addr, master_port);
  }
  return std::nullopt;
}

}  // namespace mfsdp::launch
