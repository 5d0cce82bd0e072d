// Runs launch() as `mfsdp run` will, so the tests can watch a launcher from outside: its
// output, its exit status, and what signals do to it.
//   mfsdp_launch_driver [--nproc N] [--nnodes N] [--node-rank R] [--master-addr A]
//                       [--master-port P] [--log-dir D] [--grace-ms MS] [--env K=V]...
//                       -- PROGRAM ARGS...
// A launch error prints "error: <message>" and exits with its code.

#include <cstdlib>
#include <iostream>
#include <string>

#include "executor/launch/launcher.h"
#include "schema/error.h"

int main(int argc, char** argv) {
  mfsdp::launch::LaunchOptions options;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) {
      std::cerr << "driver: " << flag << " needs a value\n";
      return 64;
    }
    const std::string value = argv[++i];
    if (flag == "--nproc") {
      options.nproc_per_node = std::atoi(value.c_str());
    } else if (flag == "--nnodes") {
      options.nnodes = std::atoi(value.c_str());
    } else if (flag == "--node-rank") {
      options.node_rank = std::atoi(value.c_str());
    } else if (flag == "--master-addr") {
      options.master_addr = value;
    } else if (flag == "--master-port") {
      options.master_port = std::atoi(value.c_str());
    } else if (flag == "--log-dir") {
      options.log_dir = value;
    } else if (flag == "--grace-ms") {
      options.grace = std::chrono::milliseconds(std::atoi(value.c_str()));
    } else if (flag == "--env") {
      const size_t equals = value.find('=');
      options.extra_env.emplace_back(value.substr(0, equals), value.substr(equals + 1));
    } else {
      std::cerr << "driver: unknown flag " << flag << "\n";
      return 64;
    }
  }
  for (; i < argc; ++i) options.argv.emplace_back(argv[i]);
  try {
    return mfsdp::launch::launch(options);
  } catch (const mfsdp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return e.exit_status();
  }
}
