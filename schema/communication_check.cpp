// communication: the collective counts and byte totals of one microbatch, recounted from the
// schedule's actions.

#include "schema/check_context.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema::check {
namespace {

void expect_total(Context& context, const std::string& path, int64_t actual, Wide expected,
                  const std::string& rule) {
  if (actual != expected) {
    context.report(path, "is " + std::to_string(actual) + ", expected " + to_string(expected) +
                             " (" + rule + ")");
  }
}

}  // namespace

void check_communication(Context& context) {
  const Plan& plan = context.plan;
  const std::optional<int64_t> reduce_size = context.reduce_size();
  const std::optional<int64_t> main_grad_size = context.main_grad_size();
  Wide all_gather_count = 0;
  Wide all_gather_bytes = 0;
  Wide reduce_scatter_count = 0;
  Wide reduce_scatter_bytes = 0;
  Wide all_reduce_bytes = 0;
  for (const ScheduleEntry& entry : plan.schedule) {
    for (const std::string& name : entry.all_gather) {
      ++all_gather_count;
      if (const Unit* unit = context.unit(name)) all_gather_bytes += unit->unsharded_bytes;
    }
    for (const std::string& name : entry.reduce_scatter) {
      ++reduce_scatter_count;
      const Unit* unit = context.unit(name);
      if (unit == nullptr || !reduce_size) continue;
      for (const Group& group : unit->groups) {
        if (!has_gradient(group)) continue;
        reduce_scatter_bytes += Wide{group.padded_numel} * *reduce_size;
        all_reduce_bytes += Wide{group.shard_numel} * *main_grad_size;
      }
    }
  }
  // Without replicas there is no all-reduce: the reduce-scatter already sums every rank.
  if (plan.mesh.replicate_size <= 1) all_reduce_bytes = 0;

  const Communication& communication = plan.communication;
  expect_total(context, "communication.all_gather_count", communication.all_gather_count,
               all_gather_count, "the schedule's all_gather actions");
  expect_total(context, "communication.all_gather_bytes", communication.all_gather_bytes,
               all_gather_bytes, "Σ unsharded_bytes of the all-gathered units");
  expect_total(context, "communication.reduce_scatter_count", communication.reduce_scatter_count,
               reduce_scatter_count, "the schedule's reduce_scatter actions");
  if (!reduce_size || !context.group_dtypes_known()) return;
  expect_total(context, "communication.reduce_scatter_bytes", communication.reduce_scatter_bytes,
               reduce_scatter_bytes,
               "Σ gradient groups' padded_numel × reduce dtype size per reduce-scatter");
  expect_total(
      context, "communication.all_reduce_bytes", communication.all_reduce_bytes, all_reduce_bytes,
      plan.mesh.replicate_size <= 1
          ? "no all-reduce without replicas"
          : "Σ gradient groups' shard_numel × main gradient dtype size per reduce-scatter");
}

}  // namespace mfsdp::schema::check
