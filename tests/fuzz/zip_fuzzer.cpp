// A model file's zip central directory through read_zip_directory's parser, which every rank
// runs on its model file before anything else reads it. Its only documented error for bad
// bytes is a model error (exit 3). A directory that reads must place every record inside the
// file, before the directory, and a stored record's two sizes must agree.

#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/torchscript/zip_directory.h"
#include "schema/error.h"
#include "tests/fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  fuzz::expect_only_errors([&] {
    try {
      const planner::ZipDirectory directory = planner::parse_zip_directory(data, size, "model.pt");
      if (directory.file_size != size) fuzz::finding("the directory reports another file size");
      for (const planner::ZipRecord& record : directory.records) {
        if (record.header_offset > size || record.stored > size - record.header_offset) {
          fuzz::finding("record '" + record.name + "' reads but lies outside the file");
        }
        if (record.method == 0 && record.stored != record.size) {
          fuzz::finding("stored record '" + record.name + "' reads with two sizes");
        }
      }
      if (directory.digest.size() != 64) fuzz::finding("the digest is not a SHA-256 in hex");
    } catch (const Error& error) {
      if (error.code() != ExitCode::kModel) {
        fuzz::finding(std::string("a zip directory error that is not a model error: ") +
                      error.what());
      }
      throw;
    }
  });
  return 0;
}
