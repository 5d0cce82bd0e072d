// open_data() (data.h): the config's checks, then the source of its kind (data_sources.h);
// the batch split and the sample seeds are in batch_split.cpp and sample_seed.cpp.
#include "executor/train/data.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "executor/train/data_sources.h"
#include "executor/train/tensor_text.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

void check_config(const DataConfig& config) {
  if (config.kind != "synthetic" && config.kind != "text" && config.kind != "tokens" &&
      config.kind != "tensors") {
    fail(ExitCode::kUsage, "unknown data kind '" + config.kind +
                               "'; pass --data-kind synthetic, text, tokens or tensors");
  }
  if (config.vocab_size <= 0) {
    fail(ExitCode::kUsage,
         "--vocab-size must be positive (got " + std::to_string(config.vocab_size) + ")");
  }
  if (config.kind == "synthetic") {
    if (config.input_dtype != "int64" && config.input_dtype != "float32") {
      fail(ExitCode::kUsage,
           "unknown --input-dtype '" + config.input_dtype + "'; pass int64 (token ids) or float32");
    }
    if (config.sample_shape.empty()) {
      fail(ExitCode::kUsage,
           "synthetic data needs --input-shape, one sample's shape (e.g. 64 for 64 tokens or "
           "3,32,32 for an image)");
    }
    for (int64_t size : config.sample_shape) {
      if (size <= 0) {
        fail(ExitCode::kUsage, "--input-shape " + shape_text(config.sample_shape) +
                                   " has a size below 1; every size must be positive");
      }
    }
    return;
  }
  if (config.path.empty()) {
    fail(ExitCode::kUsage, config.kind + " data needs a file; pass --data PATH");
  }
  if (config.kind != "tensors" && config.seq_len <= 0) {
    fail(ExitCode::kUsage, config.kind + " data needs --seq-len, the tokens per sample (got " +
                               std::to_string(config.seq_len) + ")");
  }
}

// Token-id synthetic data may give its sample shape as --seq-len.
DataConfig with_defaults(const DataConfig& given) {
  DataConfig config = given;
  if (config.kind == "synthetic" && config.sample_shape.empty() && config.seq_len > 0 &&
      config.input_dtype == "int64") {
    config.sample_shape = {config.seq_len};
  }
  return config;
}

}  // namespace

DataSource::~DataSource() = default;

void check_data(const DataConfig& given) {
  const DataConfig config = with_defaults(given);
  check_config(config);
  if (config.kind == "synthetic") return;
  std::ifstream file(config.path, std::ios::binary);
  std::error_code error;
  if (!file || std::filesystem::is_directory(config.path, error)) {
    fail(ExitCode::kIo, "cannot read data file " + config.path + ": " +
                            (file ? std::string("it is a directory") : std::strerror(errno)) +
                            "; check the --data path");
  }
  char magic[4] = {};
  file.read(magic, sizeof magic);
  if (config.kind == "tensors" && std::string(magic, 4) != std::string("PK\x03\x04", 4)) {
    fail(ExitCode::kUsage, config.path +
                               ": not a file written by torch.save (a zip archive); save "
                               "(inputs, targets) or {\"inputs\": ..., \"targets\": ...}, or "
                               "pass the --data-kind of this file (text, tokens)");
  }
}

std::unique_ptr<DataSource> open_data(const DataConfig& given, int rank, int world_size) {
  const DataConfig config = with_defaults(given);
  check_config(config);
  const BatchSplit split = split_batch(config.global_batch, world_size, config.microbatches);
  if (rank < 0 || rank >= world_size) {
    fail(ExitCode::kUsage, "rank " + std::to_string(rank) + " is outside the world of " +
                               std::to_string(world_size) + " ranks");
  }
  if (config.kind == "synthetic") return make_synthetic_source(config, split, rank);
  if (config.kind == "tensors") return make_tensor_source(config, split, rank);
  return make_window_source(config, split, rank);
}

std::string infer_data_kind(const std::string& data) {
  if (data == "synthetic") return "synthetic";
  const size_t slash = data.find_last_of('/');
  const size_t dot = data.find_last_of('.');
  const std::string extension =
      dot == std::string::npos || (slash != std::string::npos && dot < slash) ? ""
                                                                              : data.substr(dot);
  if (extension == ".txt") return "text";
  if (extension == ".bin") return "tokens";
  if (extension == ".pt" || extension == ".pth") return "tensors";
  // An unknown extension on a file that does not exist is a typo more likely than a file
  // of another kind: say that it is missing.
  std::error_code error;
  if (!std::filesystem::exists(data, error)) {
    fail(ExitCode::kIo, "cannot read data file " + data + ": " + std::strerror(ENOENT) +
                            "; check the --data path");
  }
  fail(ExitCode::kUsage, "cannot tell the kind of data file " + data +
                             " from its extension (.txt text, .bin tokens, .pt tensors); pass "
                             "--data-kind text|tokens|tensors");
}

}  // namespace mfsdp::executor
