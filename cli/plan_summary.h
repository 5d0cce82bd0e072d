#pragma once
// What `mfsdp plan` prints once the plan is written: a summary on stderr for the person who
// ran it, or with --json-summary the same as JSON on stdout (docs/cli.md).

#include <string>

#include "schema/plan.h"

namespace mfsdp::cli {

void print_summary(const schema::Plan& plan, const std::string& model, const std::string& output);
void print_json_summary(const schema::Plan& plan, const std::string& output);

}  // namespace mfsdp::cli
