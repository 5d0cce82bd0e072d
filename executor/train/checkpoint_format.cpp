#include "executor/train/checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "planner/torchscript/mapped_archive.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/file_descriptor.h"
#include "schema/plan_check.h"
#include "schema/plan_loader.h"
#include "schema/plan_rules.h"

namespace mfsdp::executor {
namespace {

using schema::FileDescriptor;

[[noreturn]] void cannot_write(const std::string& path, int error) {
  fail(ExitCode::kIo, "cannot write " + path + ": " + std::strerror(error));
}

// Whole file, or nullopt-like empty with `missing` set when it does not exist.
std::string read_bytes(const std::string& path, bool& missing) {
  missing = false;
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ENOENT) {
      missing = true;
      return {};
    }
    fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n == 0) return bytes;
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
}

// LibTorch's messages carry a C++ backtrace after the first line.
namespace fs = std::filesystem;

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

void write_tensors(torch::serialize::OutputArchive& archive, const std::string& key,
                   const std::vector<std::string>& names, const std::vector<at::Tensor>& values) {
  archive.write(key + "/size", torch::tensor(static_cast<int64_t>(values.size())));
  for (size_t i = 0; i < values.size(); ++i) {
    archive.write(key + "/" + std::to_string(i), values[i].detach(), /*is_buffer=*/true);
    archive.write(key + "/" + std::to_string(i) + "/name", c10::IValue(names[i]));
  }
}

void read_tensors(torch::serialize::InputArchive& archive, const std::string& key,
                  std::vector<std::string>& names, std::vector<at::Tensor>& values) {
  at::Tensor size;
  archive.read(key + "/size", size);
  for (int64_t i = 0; i < size.item<int64_t>(); ++i) {
    at::Tensor value;
    c10::IValue name;
    archive.read(key + "/" + std::to_string(i), value, /*is_buffer=*/true);
    archive.read(key + "/" + std::to_string(i) + "/name", name);
    values.push_back(value);
    names.push_back(name.toStringRef());
  }
}

}  // namespace

std::string rank_file_name(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05lld.pt", static_cast<long long>(rank));
  return name;
}

Manifest read_manifest(const std::string& checkpoint) {
  const std::string path = checkpoint + "/" + kManifestFile;
  bool missing = false;
  const std::string text = read_bytes(path, missing);
  if (missing) {
    fail(ExitCode::kUsage, checkpoint + " is not a checkpoint (it has no " + kManifestFile +
                               "); pass a step-NNNNNNNN directory that a save completed");
  }
  return parse_manifest(text, path);
}

std::string shard_name(const schema::Unit& unit, size_t group) {
  return unit.name + " group " + std::to_string(group);
}

std::vector<std::string> trainable_group_names(const schema::Plan& plan) {
  std::vector<std::string> names;
  for (const auto& unit : plan.units) {
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      if (schema::has_gradient(unit.groups[g])) names.push_back(shard_name(unit, g));
    }
  }
  return names;
}

RankFileEntry write_rank_file(const std::string& path, const RankState& state,
                              const OptimizerWriter& save_optimizer) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string(kCheckpointFormat)));
  archive.write("step", torch::tensor(state.step));
  archive.write("rank", torch::tensor(state.rank));
  write_tensors(archive, "shards", state.shard_names, state.shards);
  write_tensors(archive, "buffers", state.buffer_names, state.buffers);
  archive.write("rng_state", state.rng_state, /*is_buffer=*/true);
  if (state.device_rng_state.defined()) {
    archive.write("device_rng_state", state.device_rng_state, /*is_buffer=*/true);
  }
  torch::serialize::OutputArchive optimizer_state(archive.compilation_unit());
  save_optimizer(optimizer_state);
  archive.write("optimizer", optimizer_state);

  FileDescriptor file(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!file.valid()) cannot_write(path, errno);
  int error = 0;
  int64_t bytes = 0;
  try {
    // After a failed write the writer only counts: a short count would make LibTorch's archive
    // writer throw from its destructor, which aborts the process (a full disk did).
    archive.save_to([&](const void* data, size_t size) -> size_t {
      const char* at = static_cast<const char*>(data);
      size_t left = error == 0 ? size : 0;
      while (left > 0) {
        const ssize_t n = ::write(file.get(), at, left);
        if (n < 0) {
          if (errno == EINTR) continue;
          error = errno;
          break;
        }
        at += n;
        left -= static_cast<size_t>(n);
      }
      bytes += static_cast<int64_t>(size);
      return size;
    });
  } catch (const std::exception& e) {
    ::unlink(path.c_str());
    if (error != 0) cannot_write(path, error);
    fail(ExitCode::kIo, "cannot write " + path + ": " + first_line(e.what()));
  }
  if (error == 0 && ::fsync(file.get()) != 0) error = errno;
  if (file.close() != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(path.c_str());
    // The file lies in the save's temp directory, inside the checkpoint directory.
    const std::string directory =
        std::filesystem::path(path).parent_path().parent_path().lexically_normal().string();
    fail(ExitCode::kIo, "cannot write " + path + ": " + std::strerror(error) +
                            " (this rank's file needs " + std::to_string(bytes) +
                            " bytes; free space in " + (directory.empty() ? "." : directory) +
                            " or choose another --checkpoint-dir)");
  }
  const size_t slash = path.rfind('/');
  return {state.rank, slash == std::string::npos ? path : path.substr(slash + 1), bytes,
          schema::sha256_file_hex(path)};
}

namespace {

// The rank file is the regular file the manifest lists, of its size and sha256.
void check_rank_file(const std::string& path, const RankFileEntry& entry) {
  const std::string fix = "; use another checkpoint";
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT)
      fail(ExitCode::kUsage, path + " is missing: the checkpoint is incomplete" + fix);
    fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
  }
  // mfsdp writes rank files as regular files inside the checkpoint; a link could lead anywhere.
  if (S_ISLNK(info.st_mode)) {
    fail(ExitCode::kUsage, path +
                               " is a symbolic link; a checkpoint's rank files must be the "
                               "regular files the save wrote there (copy the file, not a link)" +
                               fix);
  }
  if (!S_ISREG(info.st_mode)) {
    fail(ExitCode::kUsage, path + " is not a regular file" + fix);
  }
  if (static_cast<int64_t>(info.st_size) != entry.bytes) {
    fail(ExitCode::kUsage, path + " has " + std::to_string(info.st_size) +
                               " bytes but the manifest records " + std::to_string(entry.bytes) +
                               " (truncated or overwritten)" + fix);
  }
  if (schema::sha256_file_hex(path) != entry.sha256) {
    fail(ExitCode::kUsage, path + " does not match its sha256 in the manifest (corrupt)" + fix);
  }
}

void check_rank_and_step(const std::string& path, int64_t rank, int64_t step,
                         const RankFileEntry& entry, int64_t expected_step) {
  if (rank != entry.rank || step != expected_step) {
    fail(ExitCode::kUsage, path + " holds rank " + std::to_string(rank) + " of step " +
                               std::to_string(step) + ", but the manifest lists it as rank " +
                               std::to_string(entry.rank) + " of step " +
                               std::to_string(expected_step) + "; use another checkpoint");
  }
}

// What read_tensors reads, from the module an archive was loaded as.
void attribute_tensors(const torch::jit::Module& module, const std::string& key,
                       std::vector<std::string>& names, std::vector<at::Tensor>& values) {
  const int64_t size = module.attr(key + "/size").toTensor().item<int64_t>();
  for (int64_t i = 0; i < size; ++i) {
    values.push_back(module.attr(key + "/" + std::to_string(i)).toTensor());
    names.push_back(module.attr(key + "/" + std::to_string(i) + "/name").toStringRef());
  }
}

}  // namespace

MappedRankFile map_rank_file(const std::string& checkpoint, const RankFileEntry& entry,
                             int64_t step) {
  const std::string path = checkpoint + "/" + entry.file;
  check_rank_file(path, entry);
  MappedRankFile file;
  try {
    const torch::jit::Module module =
        planner::load_mapped_archive(path, nullptr, planner::Mapping::kAll);
    const std::string format = module.attr("format").toStringRef();
    if (format != kCheckpointFormat) {
      fail(ExitCode::kUsage, path + " is format '" + format + "', not " + kCheckpointFormat +
                                 "; use another checkpoint");
    }
    file.rank = module.attr("rank").toTensor().item<int64_t>();
    check_rank_and_step(path, file.rank, module.attr("step").toTensor().item<int64_t>(), entry,
                        step);
    attribute_tensors(module, "shards", file.shard_names, file.shards);
    attribute_tensors(module, "buffers", file.buffer_names, file.buffers);
  } catch (const c10::Error& e) {
    fail(ExitCode::kUsage, path + " cannot be read as a rank file (" +
                               first_line(e.what_without_backtrace()) +
                               "); use another checkpoint");
  }
  return file;
}

RankState read_rank_file(const std::string& checkpoint, const RankFileEntry& entry, int64_t step,
                         c10::optional<at::Device> device) {
  const std::string path = checkpoint + "/" + entry.file;
  const std::string fix = "; use another checkpoint";
  check_rank_file(path, entry);
  RankState state;
  try {
    // From the file, record by record: its bytes and its tensors are never in memory at once,
    // which bounds what resharding holds (docs/checkpoints.md#resharding).
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);
    c10::IValue format;
    archive.read("format", format);
    if (format.toStringRef() != kCheckpointFormat) {
      fail(ExitCode::kUsage,
           path + " is format '" + format.toStringRef() + "', not " + kCheckpointFormat + fix);
    }
    at::Tensor value;
    archive.read("step", value);
    state.step = value.item<int64_t>();
    archive.read("rank", value);
    state.rank = value.item<int64_t>();
    read_tensors(archive, "shards", state.shard_names, state.shards);
    read_tensors(archive, "buffers", state.buffer_names, state.buffers);
    archive.read("rng_state", state.rng_state, /*is_buffer=*/true);
    archive.try_read("device_rng_state", state.device_rng_state, /*is_buffer=*/true);
    archive.read("optimizer", state.optimizer);
  } catch (const c10::Error& e) {
    fail(ExitCode::kUsage, path + " cannot be read as a rank file (" +
                               first_line(e.what_without_backtrace()) + ")" + fix);
  }
  check_rank_and_step(path, state.rank, state.step, entry, step);
  return state;
}

void write_durably(const std::string& path, const std::string& bytes) {
  FileDescriptor file(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!file.valid()) cannot_write(path, errno);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(file.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      cannot_write(path, errno);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0) cannot_write(path, errno);
  if (file.close() != 0) cannot_write(path, errno);
}

void sync_directory(const std::string& dir) {
  FileDescriptor directory(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.valid()) ::fsync(directory.get());
}

schema::Plan read_checkpoint_plan(const std::string& checkpoint, const Manifest& manifest) {
  const std::string path = checkpoint + "/" + kPlanFile;
  std::error_code error;
  if (!fs::exists(path, error)) {
    fail(ExitCode::kUsage, path + " is missing: the checkpoint is damaged; use another one");
  }
  if (schema::sha256_file_hex(path) != manifest.plan_sha256) {
    fail(ExitCode::kUsage,
         path + " does not match its sha256 in the manifest (damaged); use another checkpoint");
  }
  // The digest only shows that the plan is the one the manifest names: a plan edited and
  // re-hashed must still pass every rule before its offsets index the shards.
  schema::Plan plan =
      schema::load_plan_file(path, schema::PlanCheck::kRules, "use another checkpoint");
  const schema::Mesh& mesh = plan.mesh;
  if (mesh.world_size != manifest.mesh.world_size || mesh.shard_size != manifest.mesh.shard_size ||
      mesh.replicate_size != manifest.mesh.replicate_size) {
    fail(ExitCode::kUsage, path + " is for mesh shard " + std::to_string(mesh.shard_size) +
                               " x replicate " + std::to_string(mesh.replicate_size) +
                               ", but the manifest records shard " +
                               std::to_string(manifest.mesh.shard_size) + " x replicate " +
                               std::to_string(manifest.mesh.replicate_size) +
                               " (edited or damaged); use another checkpoint");
  }
  return plan;
}

}  // namespace mfsdp::executor
