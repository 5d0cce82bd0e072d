#include "schema/schedule_cursor.h"

#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>

#include "schema/error.h"
#include "schema/plan_json.h"
#include "tests/planner/test_support.h"  // EXPECT_MFSDP_ERROR

namespace mfsdp::schema {
namespace {

using Kind = ScheduleAction::Kind;

Plan golden(const std::string& name) {
  ParseResult r = read_plan_file(std::string(MFSDP_SOURCE_DIR) + "/plans/" + name + ".plan.json");
  EXPECT_TRUE(r.problems.empty());
  return r.plan;
}

int unit(const Plan& plan, const std::string& name) {
  for (size_t u = 0; u < plan.units.size(); ++u) {
    if (plan.units[u].name == name) return static_cast<int>(u);
  }
  throw std::logic_error("no unit " + name);
}

std::vector<std::string> describe(const Plan& plan, const std::vector<ScheduleAction>& a) {
  std::vector<std::string> out;
  for (const auto& x : a) {
    const char* kind = x.kind == Kind::kAllGather ? "ag "
                       : x.kind == Kind::kWait    ? "wait "
                                                  : "reshard ";
    out.push_back(kind + plan.units[x.unit].name);
  }
  return out;
}

using Lines = std::vector<std::string>;

// Live unsharded bytes as the executor would count them following `actions` (all-gathers
// add a unit's bytes, reshards free them), starting from `live`; `peak` keeps the most.
void follow_bytes(const Plan& plan, const std::vector<ScheduleAction>& actions, int64_t& live,
                  int64_t& peak) {
  for (const ScheduleAction& a : actions) {
    if (a.kind == Kind::kAllGather) live += plan.units[a.unit].unsharded_bytes;
    peak = std::max(peak, live);
    if (a.kind == Kind::kReshard) live -= plan.units[a.unit].unsharded_bytes;
  }
}

// two_roots: encoder then decoder, prefetch 1; decoder is kept for backward.
TEST(ScheduleCursor, FollowsThePlanEventByEvent) {
  const Plan plan = golden("two_roots");
  ScheduleCursor cursor(plan);
  const int enc = unit(plan, "encoder"), dec = unit(plan, "decoder");
  int64_t live = 0, peak = 0;
  auto step = [&](std::vector<ScheduleAction> actions) {
    follow_bytes(plan, actions, live, peak);
    return describe(plan, actions);
  };
  EXPECT_EQ(step(cursor.on_event(Point::kPreForward, enc)),
            (Lines{"ag encoder", "ag decoder", "wait encoder"}));
  EXPECT_EQ(step(cursor.on_event(Point::kPostForward, enc)), Lines{"reshard encoder"});
  EXPECT_EQ(step(cursor.on_event(Point::kPreForward, dec)), Lines{"wait decoder"});
  EXPECT_EQ(step(cursor.on_event(Point::kPostForward, dec)), Lines{});
  EXPECT_EQ(step(cursor.on_event(Point::kPreBackward, dec)), Lines{"ag encoder"});
  // post_backward decoder is passed on the way to encoder's pre_backward.
  EXPECT_EQ(step(cursor.on_event(Point::kPreBackward, enc)),
            (Lines{"reshard decoder", "wait encoder"}));
  EXPECT_EQ(step(cursor.finish()), Lines{"reshard encoder"});
  EXPECT_TRUE(cursor.divergences().empty());
  // What the plan's memory section promises is what following it holds.
  EXPECT_EQ(peak, plan.memory.peak_unsharded_bytes);
  EXPECT_EQ(live, 0);
}

TEST(ScheduleCursor, SkippedEntriesStillIssueTheirCollectivesAndAreReported) {
  const Plan plan = golden("conditional");
  ScheduleCursor cursor(plan);
  const int root = unit(plan, "<root>");
  cursor.on_event(Point::kPreForward, root);
  cursor.on_event(Point::kPreForward, unit(plan, "pre"));
  cursor.on_event(Point::kPostForward, unit(plan, "pre"));
  cursor.on_event(Point::kPreForward, unit(plan, "branch_a"));
  cursor.on_event(Point::kPostForward, unit(plan, "branch_a"));
  // branch_b is not taken: its entries are carried out on the way to post.
  const Lines actions = describe(plan, cursor.on_event(Point::kPreForward, unit(plan, "post")));
  EXPECT_EQ(actions,
            (Lines{"ag post", "wait branch_b", "reshard branch_b", "ag refine", "wait post"}));
  ASSERT_EQ(cursor.divergences().size(), 1u);
  EXPECT_EQ(cursor.divergences()[0],
            "pre_forward branch_b (call 0) did not run before pre_forward post");
}

TEST(ScheduleCursor, AnEventThePlanDoesNotHaveAheadFails) {
  const Plan plan = golden("two_roots");
  // A second call of a unit the plan calls once: more often than the plan counts.
  ScheduleCursor again(plan);
  again.on_event(Point::kPreForward, unit(plan, "encoder"));
  again.on_event(Point::kPostForward, unit(plan, "encoder"));
  again.on_event(Point::kPreForward, unit(plan, "decoder"));
  EXPECT_MFSDP_ERROR(again.on_event(Point::kPreForward, unit(plan, "encoder")), ExitCode::kRuntime,
                     "unit encoder reached pre_forward more often than the plan counts (1 per "
                     "microbatch); re-plan with the model's real unit order (`mfsdp plan "
                     "--trace-input");
  // Its first call after the plan has passed it: later than the plan has it.
  ScheduleCursor late(plan);
  late.on_event(Point::kPreForward, unit(plan, "decoder"));
  EXPECT_MFSDP_ERROR(late.on_event(Point::kPreForward, unit(plan, "encoder")), ExitCode::kRuntime,
                     "unit encoder reached pre_forward later than the plan has it (the plan had "
                     "already reached pre_forward decoder (call 0))");
}

TEST(ScheduleCursor, RestartBeginsTheNextMicrobatch) {
  const Plan plan = golden("two_roots");
  ScheduleCursor cursor(plan);
  cursor.on_event(Point::kPreForward, unit(plan, "encoder"));
  cursor.finish();
  cursor.restart();
  EXPECT_EQ(describe(plan, cursor.on_event(Point::kPreForward, unit(plan, "encoder"))),
            (Lines{"ag encoder", "ag decoder", "wait encoder"}));
}

TEST(ReduceScatterOrder, EarlyUnitsWaitForTheOnesBeforeThem) {
  const Plan plan = golden("tied_lm");  // reduce order: layers.1, layers.0, <root>
  ReduceScatterOrder order(plan);
  const int root = unit(plan, "<root>"), l0 = unit(plan, "layers.0"), l1 = unit(plan, "layers.1");
  EXPECT_EQ(order.ready(l0), std::vector<int>{});
  EXPECT_EQ(order.ready(l1), (std::vector<int>{l1, l0}));
  EXPECT_EQ(order.finish(), std::vector<int>{root});
  order.restart();
  EXPECT_EQ(order.ready(l1), std::vector<int>{l1});
}

}  // namespace
}  // namespace mfsdp::schema
