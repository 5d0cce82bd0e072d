// A checkpoint's manifest.json through what resume, export and latest_checkpoint do with its
// text: parse_manifest (JSON text, format, checksum, fields, rank file names). Its only
// documented error is a usage error. A manifest that reads must name its rank files inside the
// checkpoint directory, and must write back as itself: dump_manifest, read again, dump again
// gives the same bytes.

#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/train/manifest.h"
#include "schema/error.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

const std::string kPath = "ckpt/step-00000001/manifest.json";

void check_rank_files(const executor::Manifest& manifest) {
  for (const executor::RankFileEntry& entry : manifest.ranks) {
    const std::string& file = entry.file;
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      finding("a manifest that reads names rank file '" + file + "' outside its directory");
    }
  }
}

void check_rewrite(const executor::Manifest& manifest) {
  const std::string text = executor::dump_manifest(manifest);
  executor::Manifest again;
  try {
    again = executor::parse_manifest(text, kPath);
  } catch (const Error& error) {
    finding(std::string("a manifest as dump_manifest writes it does not read: ") + error.what());
  }
  if (executor::dump_manifest(again) != text) {
    finding("a manifest read back from dump_manifest's bytes dumps to other bytes");
  }
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_usage_errors([&] {
    const executor::Manifest manifest = executor::parse_manifest(text, fuzz::kPath);
    fuzz::check_rank_files(manifest);
    fuzz::check_rewrite(manifest);
  });
  return 0;
}
