// Writing: a checkpoint directory of size-capped files, streamed tensor by tensor.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "safetensors/safetensors.h"
#include "schema/error.h"
#include "schema/file_descriptor.h"
#include "schema/plan_json.h"

namespace mfsdp::safetensors {
namespace {

std::atomic<int> temp_counter{0};

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// What an export by this writer or save_pretrained leaves in a directory.
bool is_export_file(const std::string& name) {
  static const std::regex shard("model-[0-9]{5,}-of-[0-9]{5,}\\.safetensors");
  return name == kSingleFileName || name == kIndexFileName || std::regex_match(name, shard);
}

}  // namespace

ShardedWriter::ShardedWriter(const std::string& directory, uint64_t max_file_bytes)
    : directory_(directory), max_file_bytes_(max_file_bytes) {
  if (max_file_bytes == 0) {
    fail(ExitCode::kUsage, "the file size cap for " + directory + " is 0 bytes; give at least 1");
  }
  if (::mkdir(directory.c_str(), 0777) != 0 && errno != EEXIST) fail_io(directory, errno);
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) fail_io(directory, errno);
  if (!S_ISDIR(info.st_mode)) fail_io(directory, ENOTDIR);
}

ShardedWriter::~ShardedWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (phase_ == Phase::kFinished) return;
  for (const Shard& shard : shards_) {
    if (!shard.temp.empty() && !shard.renamed) ::unlink(shard.temp.c_str());
  }
}

void ShardedWriter::declare(const std::string& name, Dtype dtype,
                            const std::vector<int64_t>& shape) {
  if (phase_ != Phase::kDeclaring) {
    fail(ExitCode::kInternal, "ShardedWriter for " + directory_ + ": declare(" + quoted_name(name) +
                                  ") after the first write or finish()");
  }
  const std::string where = directory_ + ": tensor " + quoted_name(name);
  if (name.empty()) fail(ExitCode::kUsage, directory_ + ": a tensor has an empty name");
  if (name == "__metadata__" || name.find('\0') != std::string::npos) {
    fail(ExitCode::kUsage, where + " cannot be stored in a safetensors file; rename it");
  }
  try {
    (void)nlohmann::json(name).dump();
  } catch (const nlohmann::json::exception&) {
    fail(ExitCode::kUsage, where + " is not valid UTF-8; rename it");
  }
  if (by_name_.count(name)) fail(ExitCode::kUsage, where + " is declared twice");
  for (int64_t dim : shape) {
    if (dim < 0) {
      fail(ExitCode::kUsage, where + " has a negative dimension " + std::to_string(dim));
    }
  }
  const std::optional<int64_t> bytes = byte_size(dtype, shape);
  if (!bytes) fail(ExitCode::kUsage, where + " has more elements or bytes than int64 holds");
  // Bounds every file offset and the index's total_size too.
  if (__builtin_add_overflow(total_bytes_, *bytes, &total_bytes_)) {
    fail(ExitCode::kUsage, where + " brings the tensors to more bytes than int64 holds");
  }
  Tensor tensor;
  tensor.info.name = name;
  tensor.info.dtype = dtype;
  tensor.info.shape = shape;
  tensor.info.end = static_cast<uint64_t>(*bytes);  // the size until lay_out() places it
  by_name_[name] = tensors_.size();
  tensors_.push_back(std::move(tensor));
}

void ShardedWriter::lay_out() {
  // Greedy in declared order, as huggingface_hub splits a state dict, except that a tensor over
  // the cap closes the open file too, so files hold runs of declared order.
  uint64_t used = 0;
  size_t in_file = 0;
  size_t file = 0;
  for (Tensor& tensor : tensors_) {
    const uint64_t bytes = tensor.info.end;
    if (in_file > 0 && (bytes > max_file_bytes_ || used + bytes > max_file_bytes_)) {
      ++file;
      used = 0;
      in_file = 0;
    }
    tensor.file = file;
    used += bytes;
    ++in_file;
    if (bytes > max_file_bytes_) {
      ++file;
      used = 0;
      in_file = 0;
    }
  }
  const size_t count = tensors_.empty() ? 1 : in_file > 0 ? file + 1 : file;
  shards_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    shards_[i].name = count == 1 ? kSingleFileName : shard_name(i, count);
  }
  // Inside a file, the reference writer's order: largest alignment first, then by name.
  std::vector<std::vector<Tensor*>> members(count);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    members[tensors_[i].file].push_back(&tensors_[i]);
    shards_[tensors_[i].file].last = i;
  }
  for (size_t i = 0; i < count; ++i) {
    std::vector<Tensor*>& list = members[i];
    std::sort(list.begin(), list.end(), [](const Tensor* a, const Tensor* b) {
      if (a->info.dtype != b->info.dtype) return a->info.dtype > b->info.dtype;
      return a->info.name < b->info.name;
    });
    std::vector<TensorInfo> infos;
    uint64_t offset = 0;
    for (Tensor* tensor : list) {
      const uint64_t bytes = tensor->info.end;
      tensor->info.begin = offset;
      tensor->info.end = offset + bytes;
      offset += bytes;
      infos.push_back(tensor->info);
    }
    shards_[i].header = encode_header(infos, {{"format", "pt"}});
    for (Tensor* tensor : list) {
      tensor->info.begin += shards_[i].header.size();
      tensor->info.end += shards_[i].header.size();
    }
  }
  phase_ = Phase::kWriting;
}

std::vector<std::string> ShardedWriter::file_names() const {
  std::vector<std::string> names;
  for (const Shard& shard : shards_) names.push_back(shard.name);
  return names;
}

std::string ShardedWriter::path_of(const std::string& name) const {
  return directory_ + "/" + name;
}

void ShardedWriter::fail_io(const std::string& path, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (phase_ != Phase::kDeclaring) phase_ = Phase::kFailed;
  fail(ExitCode::kIo, "cannot write " + path + ": " + std::strerror(error) +
                          "; check the free space and permissions of " + directory_);
}

void ShardedWriter::open_shard(size_t index) {
  Shard& shard = shards_[index];
  // A hidden name in the directory itself: rename is atomic only within one file system, and
  // O_EXCL makes the name ours even if a crashed writer left one behind.
  const std::string prefix = path_of("." + shard.name + ".tmp." + std::to_string(::getpid()) + ".");
  for (int attempt = 0; fd_ < 0; ++attempt) {
    shard.temp = prefix + std::to_string(temp_counter++);
    fd_ = ::open(shard.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt == 99)) {
      const int error = errno;
      shard.temp.clear();
      fail_io(path_of(shard.name), error);
    }
  }
  size_t done = 0;
  while (done < shard.header.size()) {
    const ssize_t n = ::write(fd_, shard.header.data() + done, shard.header.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io(path_of(shard.name), n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
}

void ShardedWriter::close_shard(size_t index) {
  if (fd_ < 0) open_shard(index);  // a file of empty tensors only: just its header
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail_io(path_of(shards_[index].name), error);
  }
  if (::close(fd) != 0) fail_io(path_of(shards_[index].name), errno);
}

// Moves next_ past the complete tensors, closing each file whose last tensor that is.
void ShardedWriter::advance() {
  while (next_ < tensors_.size() && tensors_[next_].written == tensors_[next_].info.byte_size()) {
    const size_t file = tensors_[next_].file;
    if (shards_[file].last == next_) close_shard(file);
    ++next_;
  }
}

void ShardedWriter::write(const std::string& name, const void* data, size_t size) {
  if (phase_ == Phase::kDeclaring) lay_out();
  const auto misuse = [&](const std::string& problem) {
    fail(ExitCode::kInternal,
         "ShardedWriter for " + directory_ + ": write(" + quoted_name(name) + ") " + problem);
  };
  if (phase_ != Phase::kWriting) {
    misuse(phase_ == Phase::kFinished ? "after finish()" : "after a failed write");
  }
  const auto found = by_name_.find(name);
  if (found == by_name_.end()) misuse("of an undeclared tensor");
  advance();
  const size_t index = found->second;
  if (index < next_) {
    if (size == 0) return;
    misuse("of a tensor already complete");
  }
  Tensor& tensor = tensors_[index];
  if (index > next_) {
    const Tensor& current = tensors_[next_];
    misuse("before " + quoted_name(current.info.name) + " is complete (" +
           std::to_string(current.written) + " of " + std::to_string(current.info.byte_size()) +
           " bytes)");
  }
  if (size > tensor.info.byte_size() - tensor.written) {
    misuse("brings it to " + std::to_string(tensor.written + size) +
           " bytes, beyond the declared " + std::to_string(tensor.info.byte_size()));
  }
  if (fd_ < 0) open_shard(tensor.file);
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const off_t at = static_cast<off_t>(tensor.info.begin + tensor.written + done);
    const ssize_t n = ::pwrite(fd_, bytes + done, size - done, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io(path_of(shards_[tensor.file].name), n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  tensor.written += size;
  advance();
}

void ShardedWriter::finish() {
  if (phase_ == Phase::kDeclaring) lay_out();
  if (phase_ != Phase::kWriting) {
    fail(ExitCode::kInternal, "ShardedWriter for " + directory_ + ": finish() " +
                                  (phase_ == Phase::kFinished ? "twice" : "after a failed write"));
  }
  advance();
  if (next_ < tensors_.size()) {
    const Tensor& tensor = tensors_[next_];
    fail(ExitCode::kInternal, "ShardedWriter for " + directory_ + ": finish() with tensor " +
                                  quoted_name(tensor.info.name) + " at " +
                                  std::to_string(tensor.written) + " of its " +
                                  std::to_string(tensor.info.byte_size()) + " bytes");
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].temp.empty()) close_shard(i);  // no tensors at all: just a header
  }
  for (Shard& shard : shards_) {
    if (::rename(shard.temp.c_str(), path_of(shard.name).c_str()) != 0) {
      fail_io(path_of(shard.name), errno);
    }
    shard.renamed = true;
  }
  if (shards_.size() > 1) {
    // As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n".
    nlohmann::json index;
    for (const Tensor& tensor : tensors_) {
      index["weight_map"][tensor.info.name] = shards_[tensor.file].name;
    }
    index["metadata"]["total_size"] = total_bytes_;
    try {
      schema::write_file_atomically(path_of(kIndexFileName), index.dump(2, ' ', true) + "\n");
    } catch (const Error&) {
      phase_ = Phase::kFailed;
      throw;
    }
  }
  schema::FileDescriptor directory(::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.valid()) ::fsync(directory.get());
  phase_ = Phase::kFinished;
  remove_stale_files();
}

void ShardedWriter::remove_stale_files() {
  std::set<std::string> ours;
  for (const Shard& shard : shards_) ours.insert(shard.name);
  if (shards_.size() > 1) ours.insert(kIndexFileName);
  std::vector<std::string> stale;
  if (DIR* dir = ::opendir(directory_.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (is_export_file(entry->d_name) && !ours.count(entry->d_name))
        stale.push_back(entry->d_name);
    }
    ::closedir(dir);
  }
  // The index first: while it is there, the old files it names are still all there.
  std::sort(stale.begin(), stale.end());
  std::stable_partition(stale.begin(), stale.end(),
                        [](const std::string& name) { return name == kIndexFileName; });
  for (const std::string& name : stale) {
    struct stat info {};
    const std::string path = path_of(name);
    if (::lstat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) continue;
    if (::unlink(path.c_str()) != 0) {
      fail(ExitCode::kIo, "wrote " + directory_ + " but cannot remove " + path +
                              ", left by an earlier export: " + std::strerror(errno) +
                              "; remove it by hand, or readers may take it for part of this one");
    }
  }
}

}  // namespace mfsdp::safetensors
