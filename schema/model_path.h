#pragma once
// A plan's model.path: where `mfsdp plan` records the model, and where readers find it.
//
// A relative model.path is relative to the directory of the plan file, the way a Makefile's or
// a CMake preset's paths are relative to the file that holds them: a plan and its model can
// move together, and `mfsdp run` works from any directory. An absolute path stays absolute.

#include <string>

namespace mfsdp::schema {

// What `mfsdp plan MODEL -o PLAN` records: MODEL as given when it is absolute, else MODEL
// relative to PLAN's directory (lexically: symbolic links are not followed), e.g.
// examples/bytegpt.pt planned into build/x.plan.json is ../examples/bytegpt.pt.
std::string model_path_for_plan(const std::string& model, const std::string& plan_path);

struct ModelLocation {
  std::string path;  // the file to load, as a path from the current directory (or absolute)
  // True for a plan written before model.path was relative to the plan (mfsdp 0.1): the file
  // is not beside the plan but is at model.path from the current directory, where that
  // plan's model was. The caller says so (a visible warning), since the two can differ.
  bool from_current_directory = false;
};

// Where the model of the plan at `plan_path`, recorded as `recorded`, is. When neither the
// plan-relative file nor an old-style current-directory one exists, `path` is the
// plan-relative one (for the caller's error).
ModelLocation locate_model(const std::string& recorded, const std::string& plan_path);

}  // namespace mfsdp::schema
