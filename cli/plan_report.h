#pragma once
// What `mfsdp show` prints about a plan: a summary a reviewer reads in a terminal, a JSON
// digest for tools and a Graphviz graph of the unit tree. They expect a plan that passed
// check_plan (names resolve, orders are complete). The layouts are documented in docs/cli.md.

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schema/plan.h"

namespace mfsdp::cli {

// "__torch__.fixtures.Block" -> "Block".
std::string short_type_name(const std::string& type);
// The unit's flags in a fixed order: root, kept, conditional, repeated, frozen (some group does
// not require grad).
std::vector<std::string> unit_flags(const schema::Unit& unit);
// For each schedule entry, the all-gathers in flight after it: issued (here or earlier) and not
// yet waited for, in issue order.
std::vector<std::vector<std::string>> gathers_in_flight(const schema::Plan& plan);

std::string render_plan_text(const schema::Plan& plan, const std::string& file);
nlohmann::ordered_json plan_report_json(const schema::Plan& plan, const std::string& file);
std::string render_plan_dot(const schema::Plan& plan, const std::string& file);

}  // namespace mfsdp::cli
