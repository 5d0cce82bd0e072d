#pragma once
// Turning a checkpoint back into an ordinary TorchScript model file: full parameters rebuilt
// from the rank files with the plan's flat layout, loaded into the model, saved. Offline, in
// one process, without a rendezvous.

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::executor {

struct ExportSummary {
  std::string checkpoint;  // the step directory used
  int64_t step = 0;
  std::string model_path;          // the model whose code and untrained tensors were used
  std::vector<std::string> files;  // safetensors: the files written, in order
};

// Writes `out_path` (via a temp file and a rename) from `checkpoint`: a step directory, or a
// directory of them, whose newest complete checkpoint is used. The model comes from
// `model_path`, else from the path recorded in the manifest; its structure must match the
// checkpoint's plan. Trained parameters come from the checkpoint, tied names stay one tensor,
// frozen parameters come from the model file and buffers from rank 0's file. The checkpoint's
// manifest is stored in the output as the extra file "mfsdp_checkpoint.json".
// Errors: Error(kUsage) for a missing or damaged checkpoint or a model of another structure,
// kModel for a model that cannot be loaded, kIo when the output cannot be written.
ExportSummary export_model(const std::string& checkpoint, const std::string& out_path,
                           const std::string& model_path = "");

// Writes `out_dir` as Hugging Face safetensors (safetensors/safetensors.h, ShardedWriter): files
// of at most `max_file_bytes` of tensor data, model-0000K-of-0000N.safetensors and
// model.safetensors.index.json, or one model.safetensors when all fit. Every parameter under its
// own name (a tied weight once, under its first name, as transformers saves it; its aliases
// are not written), in the dtype it trained in, then rank 0's buffers. Tensors are streamed
// from the mapped rank files slice by slice: no process holds more than the slice being
// written. Errors as export_model's; each file is complete or absent.
ExportSummary export_safetensors(const std::string& checkpoint, const std::string& out_dir,
                                 int64_t max_file_bytes, const std::string& model_path = "");

}  // namespace mfsdp::executor
