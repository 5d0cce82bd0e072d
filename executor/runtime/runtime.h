#pragma once
// The one device interface the context trains through (executor/README.md): this rank's
// device, its streams and communicators by role, the plan's slots, how compute and the
// collective streams wait for each other, the collectives on tensors, memory counters and
// failure checks. cpu_runtime.h (Gloo, host memory, worker-thread streams) and
// cuda_runtime.h (NCCL, device memory, CUDA streams) implement it; make_runtime() picks one
// by the device the ranks agree on, and nothing else in the executor asks which it got.
//
// Ordering contract: a collective stream waits for compute (after_compute) before it reads
// what compute wrote or allocated; compute waits for a collective's event (compute_waits_for)
// before it reads the result. On the CPU compute is the calling thread, so after_compute has
// nothing to do and compute_waits_for blocks it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/comm/communicator.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/stream.h"
#include "executor/runtime/stream_layout.h"  // StreamRole, CommRole
#include "schema/plan.h"

namespace mfsdp::executor {

class FlatGroup;
class Timeline;

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual at::Device device() const = 0;
  // "cpu", or "cuda:0 (NVIDIA H200, PCI ...)"; make_runtime adds why auto chose the CPU.
  virtual const std::string& description() const = 0;

  virtual Stream& stream(StreamRole role) = 0;
  // nullptr only for kReplicas under a plan without replicas.
  virtual Communicator* communicator(CommRole role) = 0;
  // The plan's slot `index` (memory.slots), in the device's memory; slot_bytes() is what all
  // slots hold together.
  virtual uint8_t* slot(int index) = 0;
  virtual int64_t slot_bytes() const = 0;

  // Records collectives (all-gather, reduce-scatter, replica communicators) and compute's
  // waits on `timeline`; nullptr stops.
  virtual void set_timeline(Timeline* timeline) = 0;

  // `stream` starts its next work after what compute has issued so far.
  virtual void after_compute(Stream& stream) = 0;
  // Compute reads nothing `event`'s work writes before it has completed; the time compute is
  // held up is exposed communication (exposed_us). `what` names the awaited work for the
  // timeline, e.g. "all-gather of layers.0". Rethrows a failure of that work.
  virtual void compute_waits_for(const std::shared_ptr<Event>& event, const std::string& what) = 0;
  // Compute's time held up so far, in microseconds (on a GPU over the waits that have
  // completed; after a synchronising call such as loss.item(), all of them).
  virtual int64_t exposed_us() = 0;

  // Averages a group's gradient (per parameter, in layout order; undefined: zero) over the
  // shard group and adds this rank's shard into the group's main gradient, on the reduce
  // stream, in the main gradient's dtype. The gradients stay alive until the work is done.
  virtual void reduce_scatter_gradients(FlatGroup& group, const std::vector<at::Tensor>& grads,
                                        const std::string& what) = 0;
  // In place over a tensor on this device, on the communicator's stream.
  virtual void all_reduce(CommRole role, const at::Tensor& data, ReduceOp op,
                          const std::string& what) = 0;
  // One number over all ranks on the control communicator, waited for.
  virtual double all_reduce_scalar(double value, ReduceOp op, const std::string& what) = 0;

  // Bytes held by tensors on this device (CPU: host_memory.h's count; GPU: LibTorch's caching
  // allocator's), the most since reset_memory_peak(), and on the CPU the freed blocks the
  // allocator kept at that peak (0 on a GPU).
  virtual int64_t tensor_bytes() const = 0;
  virtual int64_t peak_tensor_bytes() const = 0;
  virtual int64_t cached_at_peak_bytes() const = 0;
  virtual void reset_memory_peak() = 0;

  // Throws the first failure of a collective without waiting (GPU; on the CPU failures come
  // out of the waits themselves).
  virtual void check() = 0;
  // Error(kUsage) when compute is no longer where it was when the runtime was made (GPU: the
  // current CUDA stream). `where` names the caller.
  virtual void check_compute_stream(const std::string& where) = 0;
};

struct RuntimeOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "auto" (ContextOptions::device)
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(30);
  std::string plan_name;  // names the plan in error messages (its path)
};

// Error(kUsage) unless `device` is cpu, cuda or auto: checked before anything is loaded.
void check_device_name(const std::string& device);

// A collective over all ranks of the rendezvous: agrees on the device (auto: cuda when every
// rank can use a GPU, else cpu, with the reason in description()), then creates streams,
// communicators (stream_layout() order) and slots. Error(kRuntime) on every rank when cuda was
// asked for and a rank cannot use one; Error(kUsage) for a device name that is none of the
// three, or a plan the chosen backend cannot run (a reduce dtype Gloo cannot reduce).
std::unique_ptr<Runtime> make_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                      Rendezvous& rendezvous, const RuntimeOptions& options);

}  // namespace mfsdp::executor
