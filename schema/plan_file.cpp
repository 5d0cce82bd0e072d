// Plan files on disk: read_plan_file and write_file_atomically.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/file_descriptor.h"
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

// Builds the document like json::parse, but keeps the byte offset of any error; json::parse
// reports none for some (a number too large for a double).
class LocatingParser {
 public:
  explicit LocatingParser(json& root) : dom_(root, /*allow_exceptions_=*/false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool value) { return dom_.boolean(value); }
  bool number_integer(json::number_integer_t value) { return dom_.number_integer(value); }
  bool number_unsigned(json::number_unsigned_t value) { return dom_.number_unsigned(value); }
  bool number_float(json::number_float_t value, const std::string& text) {
    return dom_.number_float(value, text);
  }
  bool string(json::string_t& value) { return dom_.string(value); }
  bool binary(json::binary_t& value) { return dom_.binary(value); }
  bool start_object(std::size_t size) { return dom_.start_object(size); }
  bool key(json::string_t& value) { return dom_.key(value); }
  bool end_object() { return dom_.end_object(); }
  bool start_array(std::size_t size) { return dom_.start_array(size); }
  bool end_array() { return dom_.end_array(); }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const json::exception& error) {
    error_position = position;
    error_message = error.what();
    return false;
  }

  std::size_t error_position = 0;
  std::string error_message;

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
};

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error
// while parsing value - invalid literal; last read: 'tru'" without the prefix, position and
// echoed input (which can be megabytes of an unterminated string).
std::string json_error_phrase(std::string message) {
  if (message.rfind("[json.exception.", 0) == 0) {
    const size_t end = message.find("] ");
    if (end != std::string::npos) message.erase(0, end + 2);
  }
  if (message.rfind("parse error", 0) == 0) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) message.erase(0, colon + 2);
  }
  const size_t echo = message.find("; last read: ");
  if (echo != std::string::npos) message.erase(echo);
  if (message.size() > 160) {
    size_t end = 160;
    while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
    message = message.substr(0, end) + "...";
  }
  std::replace(message.begin(), message.end(), '\n', ' ');
  return message;
}

// "line L column C" (1-based) of the character at 1-based byte `position`, or just past the
// end of the text for an error at end of input.
std::string text_location(const std::string& text, size_t position) {
  const size_t index = std::min(position == 0 ? 0 : position - 1, text.size());
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + " column " + std::to_string(column);
}

std::atomic<unsigned> temp_counter{0};

}  // namespace

ParseResult read_plan_file(const std::string& path) {
  const std::string text = read_text(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    fail(ExitCode::kUsage,
         path + ": empty file, expected a JSON plan (" + std::to_string(text.size()) + " bytes)");
  }
  json doc;
  LocatingParser parser(doc);
  if (!json::sax_parse(text, &parser)) {
    fail(ExitCode::kUsage, path + ": not valid JSON: " + json_error_phrase(parser.error_message) +
                               " (" + text_location(text, parser.error_position) + ")");
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
