#pragma once
// Which streams a rank runs and which communicators sit on them, from the plan's mesh and
// policy alone (the same answer on CPU and GPU, and on every rank of a group): the
// collective streams, `all_gather` and `reduce_scatter` (or one `unified`), and `control`
// for scalar all-reduces. Communicators are listed in creation order, which every rank
// must follow.

#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::executor {

// The streams by what runs on them: the all-gathers', the reduce-scatters' (the same stream
// as the all-gathers' under a unified-stream plan) and the one for scalar all-reduces.
enum class StreamRole { kAllGather, kReduce, kControl };
// Communicators: all-gather and reduce-scatter over the shard group, all-reduce across
// replicas (HSDP only), scalars over the world.
enum class CommRole { kAllGather, kReduceScatter, kReplicas, kControl };

struct CommunicatorPlacement {
  std::string name;        // unique per group, equal on its members: "all_gather.<replica>"
  std::vector<int> group;  // global ranks, ascending
  std::string stream;      // the stream it issues on
};

struct StreamLayout {
  std::vector<std::string> streams;  // creation order
  std::vector<CommunicatorPlacement> communicators;
  std::string reduce_stream;  // where reduce-scatters and replica all-reduces run

  const std::string& stream_for(StreamRole role) const;
  // Index into `communicators`; -1 for kReplicas without replicas.
  int communicator_for(CommRole role) const;
};

// Ranks are replicas-outer: rank = replica * shard_size + shard_rank. Shard groups run the
// all-gathers and reduce-scatters; replica groups (HSDP only) all-reduce main gradients on
// the reduce stream; `control` spans the world. Error(kInternal) for a rank outside the mesh.
StreamLayout stream_layout(const schema::Mesh& mesh, const schema::Policy& policy, int rank);

}  // namespace mfsdp::executor
