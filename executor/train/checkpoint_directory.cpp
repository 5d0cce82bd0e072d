#include "executor/train/checkpoint_directory.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_format.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

// "step-00000042" -> 42; anything else (temp directories included) -> nullopt.
std::optional<int64_t> step_of(const std::string& name) {
  const std::string prefix = "step-";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(digits);
}

}  // namespace

std::string temp_name(int64_t step, const std::string& why) {
  return "." + checkpoint_name(step) + "." + why + ".tmp";
}

bool is_temp_name(const std::string& name) {
  const std::string suffix = ".tmp";
  return name.rfind(".step-", 0) == 0 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<FoundCheckpoint> complete_checkpoints(
    const fs::path& dir, std::vector<std::pair<FoundCheckpoint, std::string>>* incomplete) {
  std::vector<FoundCheckpoint> found;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::optional<int64_t> step = step_of(it->path().filename().string());
    if (!step || !it->is_directory(error)) continue;
    std::string why;
    try {
      const int64_t named = read_manifest(it->path().string()).step;
      if (named == *step) {
        found.push_back({*step, it->path()});
        continue;
      }
      why = "its manifest is for step " + std::to_string(named);
    } catch (const Error& e) {
      // No manifest, or a damaged one: not a checkpoint anyone can resume from.
      why = e.what();
    }
    if (incomplete) incomplete->push_back({{*step, it->path()}, why});
  }
  std::sort(found.begin(), found.end(),
            [](const FoundCheckpoint& a, const FoundCheckpoint& b) { return a.step < b.step; });
  return found;
}

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  return find_latest_checkpoint(dir).path;
}

LatestCheckpoint find_latest_checkpoint(const std::string& dir) {
  std::vector<std::pair<FoundCheckpoint, std::string>> incomplete;
  const std::vector<FoundCheckpoint> all = complete_checkpoints(dir, &incomplete);
  LatestCheckpoint latest;
  if (!all.empty()) latest.path = all.back().path.string();
  const int64_t newest = all.empty() ? -1 : all.back().step;
  std::sort(incomplete.begin(), incomplete.end(),
            [](const auto& a, const auto& b) { return a.first.step > b.first.step; });
  for (const auto& [checkpoint, why] : incomplete) {
    if (checkpoint.step > newest) {
      latest.passed_over.push_back(checkpoint.path.string() + " (" + why + ")");
    }
  }
  return latest;
}

std::string resolve_checkpoint(const std::string& path, const std::string& doing, bool warn) {
  std::error_code error;
  if (fs::exists(fs::path(path) / kManifestFile, error)) return path;
  if (!fs::is_directory(path, error)) {
    fail(ExitCode::kUsage, path +
                               ": no such checkpoint directory; pass a step-NNNNNNNN directory "
                               "that training saved, or the directory that holds them");
  }
  const LatestCheckpoint found = find_latest_checkpoint(path);
  if (found.path) {
    for (const std::string& skipped : found.passed_over) {
      if (!warn) break;
      std::cerr << "mfsdp: warning: passing over " << skipped
                << ", which is not a complete checkpoint; " << doing << " the newest complete one, "
                << *found.path << std::endl;
    }
    return *found.path;
  }
  fail(ExitCode::kUsage, path +
                             " is not a checkpoint (it has no manifest.json) and holds no "
                             "complete one; pass a step-NNNNNNNN directory that a save completed");
}

}  // namespace mfsdp::executor
