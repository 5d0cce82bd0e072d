#include "planner/torchscript/mapped_archive.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/core/CPUAllocator.h>
#include <caffe2/serialize/inline_container.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "planner/torchscript/zip_directory.h"
#include "schema/error.h"
#include "schema/file_descriptor.h"

namespace mfsdp::planner {
namespace {

// Records below this are read as they are: mapping them would save nothing, and a storage of
// at least this size can hold the marker below without reading past its allocation.
constexpr uint64_t kMappedRecordBytes = 4096;
// What a large record holds in the archive torch::jit::load reads instead of the file: this
// tag and the record's index in MappedRecords, so the storage made from it can be found.
constexpr char kMarkerTag[8] = {'m', 'f', 's', 'd', 'p', 'm', 'a', 'p'};
constexpr size_t kMarkerBytes = 16;

// The whole file, privately mapped: reading faults pages in from the page cache (shared with
// every other rank of the node), writing copies a page for this process only.
class FileMap {
 public:
  explicit FileMap(const std::string& path) {
    schema::FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat info {};
    if (!file.valid() || ::fstat(file.get(), &info) != 0) {
      fail(ExitCode::kIo, path + ": cannot read the model file: " + std::strerror(errno));
    }
    size_ = static_cast<size_t>(info.st_size);
    void* base =
        ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, file.get(), 0);
    if (base == MAP_FAILED) {
      fail(ExitCode::kIo, path + ": cannot map the model file: " + std::strerror(errno));
    }
    base_ = static_cast<char*>(base);
  }
  ~FileMap() { ::munmap(base_, size_); }
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  char* at(uint64_t offset) const { return base_ + offset; }
  size_t size() const { return size_; }

  // Gives back the pages wholly inside [begin, begin + bytes): the next read of them reads
  // the file again; a page shared with a neighbouring record stays.
  void release(const char* begin, size_t bytes) const {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
};

// The DataPtr context of a mapped storage: it keeps the map alive, and gives the storage's
// pages back when the storage is freed.
struct MappedStorage {
  std::shared_ptr<const FileMap> map;
  char* begin;
  size_t bytes;
};

void free_mapped_storage(void* context) {
  auto* storage = static_cast<MappedStorage*>(context);
  storage->map->release(storage->begin, storage->bytes);
  delete storage;
}

struct MappedRecord {
  std::string name;  // without the archive folder: "data/0"
  uint64_t offset;   // of its bytes in the file
  uint64_t size;
};

// The archive torch::jit::load reads: every record as in the file, but the large stored
// records of data/ (the tensors) each replaced by a marker naming it.
std::string marked_archive(caffe2::serialize::PyTorchStreamReader& reader,
                           const std::vector<MappedRecord>& mapped) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < mapped.size(); ++i) index[mapped[i].name] = i;
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    archive.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.setMinVersion(reader.version());
  // The writer adds these itself.
  static const std::set<std::string> kWritten = {"version", ".data/version",
                                                 ".data/serialization_id", "byteorder"};
  for (const std::string& name : reader.getAllRecords()) {
    if (kWritten.count(name)) continue;
    auto found = index.find(name);
    if (found != index.end()) {
      char marker[kMarkerBytes];
      std::memcpy(marker, kMarkerTag, sizeof kMarkerTag);
      const uint64_t i = found->second;
      std::memcpy(marker + sizeof kMarkerTag, &i, sizeof i);
      writer.writeRecord(name, marker, sizeof marker);
      continue;
    }
    auto [data, size] = reader.getRecord(name);
    writer.writeRecord(name, data.get(), size);
  }
  writer.writeEndOfFile();
  return archive;
}

// The large, stored tensor records of the archive, where their bytes lie.
std::vector<MappedRecord> mappable_records(const ZipDirectory& directory,
                                           caffe2::serialize::PyTorchStreamReader& reader,
                                           const std::string& path) {
  std::vector<MappedRecord> mapped;
  for (const ZipRecord& record : directory.records) {
    const size_t slash = record.name.find('/');
    if (slash == std::string::npos) continue;
    const std::string name = record.name.substr(slash + 1);
    if (name.rfind("data/", 0) != 0 || record.method != 0 || record.size < kMappedRecordBytes) {
      continue;
    }
    const uint64_t offset = reader.getRecordOffset(name);
    if (offset > directory.file_size || record.size > directory.file_size - offset) {
      fail(ExitCode::kModel, path + ": record '" + name +
                                 "' lies outside the file (truncated?); save the model again");
    }
    mapped.push_back({name, offset, record.size});
  }
  return mapped;
}

// Every tensor reachable from the module's objects, and whether a parameter holds its storage.
class TensorWalk {
 public:
  void visit(const c10::IValue& value, bool parameter) {
    if (value.isTensor()) {
      add(value.toTensor(), parameter);
    } else if (value.isObject()) {
      const auto object = value.toObject();
      if (!objects_.insert(object.get()).second) return;
      const auto type = object->type();
      for (size_t i = 0; i < object->slots().size(); ++i) {
        visit(object->getSlot(i), i < type->numAttributes() && type->is_parameter(i));
      }
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) visit(element, false);
    } else if (value.isTuple()) {
      for (const c10::IValue& element : value.toTupleRef().elements()) visit(element, false);
    } else if (value.isGenericDict()) {
      for (const auto& entry : value.toGenericDict()) {
        visit(entry.key(), false);
        visit(entry.value(), false);
      }
    }
  }

  // Storage -> whether a parameter uses it.
  const std::unordered_map<c10::StorageImpl*, bool>& storages() const { return storages_; }

 private:
  std::unordered_set<const void*> objects_;
  std::unordered_map<c10::StorageImpl*, bool> storages_;

  void add(const at::Tensor& tensor, bool parameter) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    storages_[tensor.storage().unsafeGetStorageImpl()] |= parameter;
  }
};

// Which mapped record a storage was made from, if it was made from a marker.
std::optional<size_t> marked_record(c10::StorageImpl& storage,
                                    const std::vector<MappedRecord>& mapped) {
  const auto* data = static_cast<const char*>(storage.data());
  if (data == nullptr || storage.nbytes() < kMappedRecordBytes ||
      std::memcmp(data, kMarkerTag, sizeof kMarkerTag) != 0) {
    return std::nullopt;
  }
  uint64_t i = 0;
  std::memcpy(&i, data + sizeof kMarkerTag, sizeof i);
  if (i >= mapped.size() || mapped[i].size != storage.nbytes()) return std::nullopt;
  return i;
}

}  // namespace

bool has_no_data(const at::Tensor& tensor) {
  return tensor.defined() && tensor.has_storage() && tensor.storage().nbytes() > 0 &&
         tensor.storage().data() == nullptr;
}

void allocate_missing_data(const at::Tensor& tensor) {
  if (!has_no_data(tensor)) return;
  tensor.storage().set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(tensor.storage().nbytes()));
}

std::optional<std::string> first_tensor_without_data(const torch::jit::Module& module) {
  for (const auto& t : module.named_attributes(/*recurse=*/true)) {
    if (t.value.isTensor() && has_no_data(t.value.toTensor())) return t.name;
  }
  return std::nullopt;
}

void release_mapped_pages(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage() || !tensor.is_contiguous()) return;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &free_mapped_storage) return;
  const auto* storage = static_cast<const MappedStorage*>(data.get_context());
  storage->map->release(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
}

torch::jit::Module load_mapped_archive(const std::string& path, MappedArchiveStats* stats,
                                       Mapping mapping) {
  const ZipDirectory directory = read_zip_directory(path);
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::vector<MappedRecord> mapped = mappable_records(directory, reader, path);
  auto map = std::make_shared<const FileMap>(path);
  if (map->size() != directory.file_size) {
    fail(ExitCode::kIo, path + ": the model file changed while it was read; load it again");
  }
  // A marker that no reachable tensor holds (a storage the walk below cannot see) would leave
  // a storage claiming bytes it does not have: such records are read as they are, next time.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::istringstream archive(marked_archive(reader, mapped));
    torch::jit::Module module = torch::jit::load(archive, torch::kCPU);
    TensorWalk walk;
    walk.visit(module._ivalue(), false);
    std::vector<bool> found(mapped.size(), false);
    MappedArchiveStats counted;
    counted.directory_digest = directory.digest;
    for (const auto& [storage, parameter] : walk.storages()) {
      const auto i = marked_record(*storage, mapped);
      if (!i) continue;
      found[*i] = true;
      char* begin = map->at(mapped[*i].offset);
      const size_t bytes = mapped[*i].size;
      if (parameter || mapping == Mapping::kAll) {
        storage->set_data_ptr_noswap(at::DataPtr(begin, new MappedStorage{map, begin, bytes},
                                                 &free_mapped_storage, at::kCPU));
        counted.mapped_bytes += static_cast<int64_t>(bytes);
      } else {
        at::DataPtr copy = c10::GetCPUAllocator()->allocate(bytes);
        std::memcpy(copy.get(), begin, bytes);
        map->release(begin, bytes);
        storage->set_data_ptr_noswap(std::move(copy));
      }
    }
    std::vector<MappedRecord> unfound;
    for (size_t i = 0; i < mapped.size(); ++i) {
      if (!found[i]) unfound.push_back(mapped[i]);
    }
    if (unfound.empty()) {
      if (stats) {
        for (const auto& [storage, parameter] : walk.storages()) {
          counted.tensor_bytes += static_cast<int64_t>(storage->nbytes());
          if (parameter) counted.parameter_bytes += static_cast<int64_t>(storage->nbytes());
          if (storage->nbytes() > 0 && storage->data() == nullptr) {
            counted.missing_bytes += static_cast<int64_t>(storage->nbytes());
          }
        }
        *stats = counted;
      }
      return module;
    }
    std::set<std::string> names;
    for (const MappedRecord& record : unfound) names.insert(record.name);
    std::vector<MappedRecord> kept;
    for (const MappedRecord& record : mapped) {
      if (!names.count(record.name)) kept.push_back(record);
    }
    mapped = std::move(kept);
  }
  fail(ExitCode::kInternal, path + ": tensors of the model could not be mapped; please report it");
}

}  // namespace mfsdp::planner
