// Reading: one file through a read-only memory map, and a checkpoint directory through its
// index.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "safetensors/safetensors.h"
#include "schema/error.h"
#include "schema/file_descriptor.h"

namespace mfsdp::safetensors {
namespace {

[[noreturn]] void cannot_read(const std::string& path, int error) {
  fail(ExitCode::kIo, "cannot read " + path + ": " + std::strerror(error) +
                          "; check the path and its permissions");
}

std::string join(const std::string& directory, const std::string& name) {
  return !directory.empty() && directory.back() == '/' ? directory + name : directory + "/" + name;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole of a small text file; Error(kUsage) beyond `limit` bytes.
std::string read_text(const std::string& path, uint64_t limit) {
  schema::FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) cannot_read(path, errno);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) cannot_read(path, errno);
  if (!S_ISREG(info.st_mode)) cannot_read(path, S_ISDIR(info.st_mode) ? EISDIR : EINVAL);
  if (static_cast<uint64_t>(info.st_size) > limit) {
    fail(ExitCode::kUsage, path + " is " + std::to_string(info.st_size) + " bytes, beyond the " +
                               std::to_string(limit) + " it may have; is it an index?");
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(file.get(), &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) cannot_read(path, errno);
    if (n == 0) break;  // shrank while read: parse what is there
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

// The regular files (links followed) named *.safetensors in `directory`, sorted.
std::vector<std::string> safetensors_files(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) cannot_read(directory, errno);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    struct stat info {};
    if (ends_with(name, ".safetensors") && ::stat(join(directory, name).c_str(), &info) == 0 &&
        S_ISREG(info.st_mode)) {
      names.push_back(name);
    }
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

File::Mapping::~Mapping() {
  if (data) ::munmap(const_cast<uint8_t*>(data), size);
}

File::File(const std::string& path) : path_(path) {
  schema::FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) cannot_read(path, errno);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) cannot_read(path, errno);
  // mmap needs a regular file; a pipe has no size to map.
  if (!S_ISREG(info.st_mode)) cannot_read(path, S_ISDIR(info.st_mode) ? EISDIR : EINVAL);
  const size_t size = static_cast<size_t>(info.st_size);
  if (size > 0) {
    void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.get(), 0);
    if (data == MAP_FAILED) cannot_read(path, errno);
    mapping_.data = static_cast<const uint8_t*>(data);
    mapping_.size = size;
  }
  header_ = parse_header(mapping_.data, mapping_.size, mapping_.size, path);
  by_name_.reserve(header_.tensors.size());
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_[header_.tensors[i].name] = i;
}

const TensorInfo* File::find(const std::string& name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : &header_.tensors[found->second];
}

void File::release(uint64_t begin, uint64_t end) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  end = std::min<uint64_t>(end, mapping_.size);
  const uint64_t first = (begin + page - 1) / page * page;
  const uint64_t last = end / page * page;
  if (!mapping_.data || first >= last) return;
  // Advice only: a failure leaves the pages mapped, which costs memory, not correctness.
  ::madvise(const_cast<uint8_t*>(mapping_.data) + first, last - first, MADV_DONTNEED);
}

Checkpoint::Checkpoint(const std::string& path) : path_(path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) cannot_read(path, errno);
  if (!S_ISDIR(info.st_mode)) {
    add_file(path);
    return;
  }
  const std::string index_path = join(path, kIndexFileName);
  if (::stat(index_path.c_str(), &info) == 0) {
    open_index(path, index_path);
    return;
  }
  const std::vector<std::string> names = safetensors_files(path);
  if (names.size() == 1) {
    add_file(join(path, names[0]));
    return;
  }
  if (names.empty()) {
    fail(ExitCode::kUsage, path + " holds neither " + kIndexFileName +
                               " nor a .safetensors file; name a safetensors file or a directory "
                               "that save_pretrained wrote");
  }
  std::string listed;
  for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
  fail(ExitCode::kUsage, path + " holds " + std::to_string(names.size()) + " .safetensors files (" +
                             listed + ") and no " + kIndexFileName +
                             "; name one of the files, or add the index");
}

void Checkpoint::add_file(const std::string& path) {
  files_.push_back(std::make_unique<File>(path));
  const File* file = files_.back().get();
  for (const TensorInfo& tensor : file->tensors()) tensors_[tensor.name] = {file, &tensor};
}

void Checkpoint::open_index(const std::string& directory, const std::string& index_path) {
  const Index index = parse_index(read_text(index_path, kMaxHeaderBytes), index_path);
  const char* const fix = "; re-export the checkpoint or download it again";
  std::map<std::string, std::string> first_tensor;  // file name -> a tensor mapped to it
  for (const auto& [tensor, name] : index.weight_map) first_tensor.emplace(name, tensor);
  std::map<std::string, const File*> by_file;
  for (const auto& [name, tensor] : first_tensor) {
    const std::string path = join(directory, name);
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) {
      fail(ExitCode::kUsage, index_path + " maps tensor " + quoted_name(tensor) + " to " +
                                 quoted_name(name) + ", which is not in " + directory +
                                 " (an incomplete download or copy?)" + fix);
    }
    files_.push_back(std::make_unique<File>(path));
    by_file[name] = files_.back().get();
  }
  for (const auto& [tensor, name] : index.weight_map) {
    const File* file = by_file.at(name);
    const TensorInfo* info = file->find(tensor);
    if (!info) {
      fail(ExitCode::kUsage,
           index_path + " maps tensor " + quoted_name(tensor) + " to " + file->path() +
               ", which does not hold it; the index belongs to other files" + fix);
    }
    tensors_[tensor] = {file, info};
  }
  for (const auto& [name, file] : by_file) {
    for (const TensorInfo& tensor : file->tensors()) {
      const auto mapped = index.weight_map.find(tensor.name);
      if (mapped == index.weight_map.end()) {
        fail(ExitCode::kUsage, file->path() + " holds tensor " + quoted_name(tensor.name) +
                                   ", which " + index_path + " does not list" + fix);
      }
      if (mapped->second != name) {
        fail(ExitCode::kUsage,
             file->path() + " holds tensor " + quoted_name(tensor.name) + ", which " + index_path +
                 " maps to " + quoted_name(mapped->second) + " (one tensor in two files)" + fix);
      }
    }
  }
}

const Checkpoint::Entry* Checkpoint::find(const std::string& name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second;
}

const Checkpoint::Entry& Checkpoint::at(const std::string& name) const {
  const Entry* entry = find(name);
  if (!entry) {
    fail(ExitCode::kUsage, path_ + " has no tensor " + quoted_name(name) +
                               "; check the name against the model's parameters");
  }
  return *entry;
}

}  // namespace mfsdp::safetensors
