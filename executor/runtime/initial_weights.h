#pragma once
// Initial weights from Hugging Face safetensors instead of the model file's parameters
// (`mfsdp run --init-from`, docs/large-models.md#safetensors-in). Every tensor of the file is
// matched to the plan's parameters and the model's buffers before anything is read; a rank
// then reads only the slices of each parameter its shards hold, from the mapped file.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "schema/plan.h"

namespace mfsdp::safetensors {
class Checkpoint;
}

namespace mfsdp::executor {

class InitialWeights {
 public:
  // Opens `path` (a .safetensors file, or a directory with model.safetensors.index.json) and
  // matches it: its names renamed by `name_map` (a --name-map file; empty: as they are), each
  // parameter by its name or one of its aliases, of the plan's shape (reversed, for a tensor
  // the map says is transposed), in the plan's dtype or, for floating parameters, any
  // floating dtype (converted when read); each buffer of `module` by name, if the file has
  // it. Error(kUsage), one line listing what is missing, unexpected, of another shape or of
  // another dtype, or two file names the map gives one model name, when it does not fit.
  InitialWeights(const std::string& path, const schema::Plan& plan,
                 const torch::jit::Module& module, const std::string& name_map = "");
  ~InitialWeights();

  // `group`'s parameters in layout order, as tensors over the mapped file in its dtype (the
  // transposed ones as transposed views).
  std::vector<at::Tensor> values(const schema::Group& group) const;
  // Gives back the pages of `group`'s tensors, once its shards hold their slices.
  void release(const schema::Group& group) const;
  // Copies the file's buffers into the module's (converted to their dtype).
  void load_buffers(torch::jit::Module& module) const;
  // "PATH: 28 parameter(s), in their dtypes" or with the conversions ("bfloat16 -> float32
  // for 28"), for the log.
  const std::string& description() const { return description_; }
  // What every rank compares with rank 0's before training: each tensor's name, dtype, shape
  // and place in its file (weights that differ in value only are not told apart).
  std::string layout_digest() const;

 private:
  struct Match;
  struct Source;
  std::unique_ptr<safetensors::Checkpoint> file_;
  // Per group of the plan, its parameters' tensors in layout order (the constructor throws
  // unless every parameter has one).
  std::map<const schema::Group*, std::vector<Match>> params_;
  std::vector<Match> buffers_;  // the module's buffers the file has
  std::string description_;
};

}  // namespace mfsdp::executor
