#include "executor/runtime/stream_layout.h"

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

std::vector<int> strided(int first, int count, int stride) {
  std::vector<int> ranks;
  for (int i = 0; i < count; ++i) ranks.push_back(first + i * stride);
  return ranks;
}

}  // namespace

StreamLayout stream_layout(const schema::Mesh& mesh, const schema::Policy& policy, int rank) {
  const int shards = static_cast<int>(mesh.shard_size);
  const int replicas = static_cast<int>(mesh.replicate_size);
  const int world = static_cast<int>(mesh.world_size);
  if (shards < 1 || replicas < 1 || shards * replicas != world || rank < 0 || rank >= world) {
    fail(ExitCode::kInternal, "rank " + std::to_string(rank) + " is not in a mesh of " +
                                  std::to_string(world) + " = " + std::to_string(replicas) +
                                  " replica(s) x " + std::to_string(shards) + " shard(s)");
  }
  const int replica = rank / shards;
  const int shard_rank = rank % shards;
  const std::vector<int> shard_group = strided(replica * shards, shards, 1);

  StreamLayout layout;
  const std::string gather_stream = policy.unified_stream ? "unified" : "all_gather";
  layout.reduce_stream = policy.unified_stream ? "unified" : "reduce_scatter";
  layout.streams.push_back(gather_stream);
  if (!policy.unified_stream) layout.streams.push_back(layout.reduce_stream);
  layout.streams.push_back("control");

  const std::string replica_suffix = "." + std::to_string(replica);
  layout.communicators.push_back({"all_gather" + replica_suffix, shard_group, gather_stream});
  layout.communicators.push_back(
      {"reduce_scatter" + replica_suffix, shard_group, layout.reduce_stream});
  if (replicas > 1) {
    layout.communicators.push_back({"replicas." + std::to_string(shard_rank),
                                    strided(shard_rank, replicas, shards), layout.reduce_stream});
  }
  layout.communicators.push_back({"control", strided(0, world, 1), "control"});
  return layout;
}

const std::string& StreamLayout::stream_for(StreamRole role) const {
  switch (role) {
    case StreamRole::kAllGather:
      return streams.front();
    case StreamRole::kReduce:
      return reduce_stream;
    case StreamRole::kControl:
      return streams.back();
  }
  fail(ExitCode::kInternal, "unknown stream role");
}

int StreamLayout::communicator_for(CommRole role) const {
  const char* kind = role == CommRole::kAllGather       ? "all_gather"
                     : role == CommRole::kReduceScatter ? "reduce_scatter"
                     : role == CommRole::kReplicas      ? "replicas"
                                                        : "control";
  for (size_t i = 0; i < communicators.size(); ++i) {
    const std::string& name = communicators[i].name;
    if (name.substr(0, name.find('.')) == kind) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace mfsdp::executor
