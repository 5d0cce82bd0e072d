#pragma once
// Running under another launcher (torchrun, Slurm's srun, Open MPI's mpirun), which starts
// one process per rank itself: its variables, turned into torchrun's, which the executor reads
// (LaunchEnv). No LibTorch. See docs/launch.md.

#include <map>
#include <optional>
#include <string>

namespace mfsdp::launch {

using Environment = std::map<std::string, std::string>;

// This process's environment.
Environment current_environment();

// When `env` says this process is one rank started by another launcher, the variables to set
// so that it runs as that one worker: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
// and, when known, LOCAL_WORLD_SIZE. std::nullopt when no launcher started it. Checked in this
// order, the first that matches wins:
//   torchrun: RANK or WORLD_SIZE set (also what launch() gives its workers);
//   Open MPI: any OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} set, size > 1;
//   srun:     SLURM_STEP_ID (or SLURM_STEPID) and SLURM_PROCID set, SLURM_NTASKS > 1.
// A step of one task (an `srun --pty bash` shell, `mpirun -np 1`) and an sbatch script (no
// step id) count as not launched: then `mfsdp run` starts the workers itself.
// `master_addr` and `master_port` are --master-addr and --master-port when given (empty and 0
// when not); they win over MASTER_ADDR and MASTER_PORT in `env`, and one or the other is
// required, since neither srun nor mpirun says where rank 0 listens.
// Throws Error(kUsage) naming the variable when a set is partial (RANK without WORLD_SIZE,
// SLURM_PROCID without SLURM_NTASKS, ...), a value is not a number or out of range, or the
// master address or port is missing.
std::optional<Environment> external_worker_env(const Environment& env,
                                               const std::string& master_addr = {},
                                               int master_port = 0);

}  // namespace mfsdp::launch
