#pragma once
// Loading a TorchScript archive without reading its tensors (docs/large-models.md,
// "Shard-wise loading"). The module's code, pickles and small records are read as
// torch::jit::load reads them; every large tensor record is instead backed by a private
// read-only-until-written map of the file, so its pages are read only where someone reads
// the tensor, and go back to the kernel when the tensor's storage is freed. A rank that copies
// its slice of each parameter into its shard and then drops the parameter has read its share
// of the file and no more.

#include <cstdint>
#include <optional>
#include <string>

#include <torch/script.h>

namespace mfsdp::planner {

struct MappedArchiveStats {
  int64_t tensor_bytes = 0;     // every storage the module holds, each once
  int64_t parameter_bytes = 0;  // of those, the storages parameters use
  int64_t mapped_bytes = 0;     // of those, left on the file map (read only where read)
  // Of those, storages with no values at all: a skeleton, saved from the meta device, whose
  // records are empty (LibTorch loads them as CPU storages of their size over no memory).
  int64_t missing_bytes = 0;
  // The zip directory digest of the file as it was loaded (ZipDirectory::digest).
  std::string directory_digest;
};

// Whether `tensor` is one of a skeleton's: a storage of some size with no memory behind it.
// Reading or writing it would crash; a skeleton's values must come from elsewhere.
bool has_no_data(const at::Tensor& tensor);
// Gives a tensor with no data (has_no_data) memory of its own, uninitialised, for its values to
// be written into; tensors sharing its storage share the memory. A no-op for any other tensor.
void allocate_missing_data(const at::Tensor& tensor);
// The name of the first of `module`'s tensors (parameters, buffers, attributes) that has no
// data, if any: what a command that reads every value names when refusing a skeleton.
std::optional<std::string> first_tensor_without_data(const torch::jit::Module& module);

// Which tensors stay on the map.
enum class Mapping {
  kParameters,  // parameters; every other tensor is copied into memory at once, so a module
                // that writes its buffers never writes to the map
  kAll,         // every tensor: for archives only read (checkpoint rank files by export)
};

// torch::jit::load(path, kCPU) with large tensor records mapped instead of read. Throws what
// torch::jit::load throws for a file that is not TorchScript, and Error(kModel) for a damaged
// zip directory.
torch::jit::Module load_mapped_archive(const std::string& path, MappedArchiveStats* stats,
                                       Mapping mapping = Mapping::kParameters);

// Gives back the pages wholly inside `tensor`'s bytes when its storage is mapped (a no-op for
// any other tensor): a reader that copied them out keeps only what it still needs resident.
// The tensor stays valid; reading it again reads the file again.
void release_mapped_pages(const at::Tensor& tensor);

}  // namespace mfsdp::planner
