// Plan files on disk: read_plan_file and write_file_atomically.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/file_descriptor.h"
#include "schema/json_text.h"
#include "schema/plan_json.h"

namespace mfsdp::schema {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n == 0) return text;
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
}

std::atomic<unsigned> temp_counter{0};

}  // namespace

ParseResult read_plan_file(const std::string& path) {
  const std::string text = read_text(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    fail(ExitCode::kUsage,
         path + ": empty file, expected a JSON plan (" + std::to_string(text.size()) + " bytes)");
  }
  // A model where a plan belongs is the commonest mix-up: TorchScript archives are zip files.
  if (text.compare(0, 4, "PK\x03\x04") == 0) {
    fail(ExitCode::kUsage, path +
                               " is a model (a zip archive, as TorchScript saves), not a plan; "
                               "plan it first: mfsdp plan " +
                               path +
                               " --world-size N --unit 'layers.*' --unit '<root>' -o "
                               "model.plan.json");
  }
  json doc;
  const std::string error = parse_json_text(text, doc);
  if (!error.empty()) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    const bool json_like = text[first] == '{' || text[first] == '[';
    fail(ExitCode::kUsage,
         path + ": not valid JSON: " + error +
             (json_like ? "" : "; a plan is the JSON file that mfsdp plan writes"));
  }
  try {
    return parse_plan(doc);
  } catch (const Error& error) {
    fail(error.code(), path + ": " + error.what());
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const size_t slash = path.rfind('/');
  const bool has_dir = slash != std::string::npos;
  const std::string dir = !has_dir ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = has_dir ? path.substr(slash + 1) : path;
  // A hidden name in the target's directory: rename is atomic only within one file system.
  const std::string temp_prefix = (has_dir ? path.substr(0, slash + 1) : "") + "." + base +
                                  ".tmp." + std::to_string(::getpid()) + ".";
  const auto cannot_write = [&path](int error) {
    fail(ExitCode::kIo, "cannot write " + path + ": " + std::strerror(error));
  };

  std::string temp;
  int fd = -1;
  // O_EXCL makes the name ours even if a crashed writer left one with the same number behind.
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = temp_prefix + std::to_string(temp_counter++);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 99)) cannot_write(errno);
  }
  FileDescriptor file(fd);
  const auto give_up = [&](int error) {
    file.close();
    ::unlink(temp.c_str());
    cannot_write(error);
  };
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(file.get(), text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up(errno);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0) give_up(errno);
  if (file.close() != 0) give_up(errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) give_up(errno);
  // Makes the rename itself durable; the file is complete whether or not this succeeds.
  FileDescriptor directory(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.valid()) ::fsync(directory.get());
}

}  // namespace mfsdp::schema
