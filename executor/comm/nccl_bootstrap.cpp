// make_nccl_communicators (nccl_communicator.h): each group's first rank makes its unique id,
// one exchange through the rendezvous store hands every id to every rank, then each rank joins
// its communicators in the order given.
#include <nccl.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "executor/comm/nccl_communicator.h"
#include "executor/comm/nccl_dtype.h"
#include "executor/comm/nccl_error.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "schema/error.h"

namespace mfsdp::executor {

namespace {

// NCCL 2.22 and later connect a communicator's peers lazily, at its first collective: one
// tiny all-reduce on each, awaited here, so that the first reduce-scatter of training does not
// block the autograd thread until every peer arrives (and a peer that never does fails here,
// at start-up, within the timeout).
void warm_up(const std::vector<std::unique_ptr<NcclCommunicator>>& communicators) {
  struct Scratch {
    explicit Scratch(int device) : device(device) {
      CurrentDevice current(device);
      check_cuda(cudaMalloc(&data, sizeof(float)), "allocating 4 bytes to warm up NCCL");
    }
    ~Scratch() {
      CurrentDevice current(device);
      cudaFree(data);
    }
    int device;
    void* data = nullptr;
  };
  std::vector<std::unique_ptr<Scratch>> scratch;
  for (const auto& c : communicators) {
    CudaStream& stream = c->cuda_stream();
    scratch.push_back(std::make_unique<Scratch>(stream.device()));
    CurrentDevice current(stream.device());
    check_cuda(cudaMemsetAsync(scratch.back()->data, 0, sizeof(float), stream.native()),
               "clearing the NCCL warm-up buffer");
    c->all_reduce(scratch.back()->data, 1, "float32", ReduceOp::kSum, "warm-up all-reduce");
  }
  for (const auto& c : communicators) c->cuda_stream().record()->wait();
}

}  // namespace

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
    Rendezvous& rendezvous, const std::vector<NcclCommunicatorSpec>& specs,
    std::chrono::milliseconds timeout) {
  const int rank = rendezvous.rank();
  std::vector<int> group_ranks;
  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> led;  // ids of the groups this rank leads
  for (const NcclCommunicatorSpec& spec : specs) {
    const std::string label = "rank " + std::to_string(rank) + ": NCCL communicator '" + spec.name +
                              "' over ranks {" + rank_list(spec.group) + "}";
    int group_rank = -1;
    for (size_t i = 0; i < spec.group.size(); ++i) {
      const int r = spec.group[i];
      if (r < 0 || r >= rendezvous.world_size() || (i > 0 && r <= spec.group[i - 1])) {
        fail(ExitCode::kInternal, label + ": the group must list distinct ranks of 0.." +
                                      std::to_string(rendezvous.world_size() - 1) +
                                      " in ascending order");
      }
      if (r == rank) group_rank = static_cast<int>(i);
    }
    if (group_rank < 0) fail(ExitCode::kInternal, label + ": this rank is not a member");
    if (spec.stream == nullptr) fail(ExitCode::kInternal, label + ": no stream");
    if (!names.insert(spec.name).second) {
      fail(ExitCode::kInternal, label + ": the name is already taken by another communicator");
    }
    group_ranks.push_back(group_rank);
    if (group_rank == 0) {
      ncclUniqueId id{};
      const ncclResult_t result = ncclGetUniqueId(&id);
      if (result != ncclSuccess) {
        NcclFailure f;
        f.rank = rank;
        f.communicator = spec.name;
        f.what = "making its unique id";
        f.result = result;
        fail(nccl_failure_code(f), nccl_failure_message(f));
      }
      led.emplace_back(spec.name, encode_unique_id(id));
    }
  }
  const std::vector<std::string> published =
      rendezvous.exchange("mfsdp/nccl-unique-ids", publish_unique_ids(led));

  std::vector<std::unique_ptr<NcclCommunicator>> communicators;
  for (size_t c = 0; c < specs.size(); ++c) {
    const NcclCommunicatorSpec& spec = specs[c];
    const int leader = spec.group.front();
    const std::string id = find_unique_id(published.at(leader), spec.name);
    if (id.empty()) {
      fail(ExitCode::kInternal,
           "rank " + std::to_string(rank) + ": NCCL communicator '" + spec.name +
               "': its first rank, " + std::to_string(leader) +
               ", published no id for it; every rank must create its communicators in one "
               "call, with the same names and groups on every member");
    }
    communicators.push_back(
        std::make_unique<NcclCommunicator>(id, group_ranks[c], static_cast<int>(spec.group.size()),
                                           *spec.stream, spec.name, rank, timeout));
  }
  warm_up(communicators);
  return communicators;
}

}  // namespace mfsdp::executor
