#include "schema/shard_map.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema {
namespace {

// A trainable parameter of the saved plan: its group's position and its layout.
struct SavedParam {
  size_t group = 0;
  const Group* layout = nullptr;
  const ParamLayout* param = nullptr;
};

// Every name (first registration and tied aliases) of every trainable parameter of `plan`.
std::map<std::string, SavedParam> trainable_params_by_name(const Plan& plan) {
  std::map<std::string, SavedParam> params;
  size_t index = 0;
  for (const Unit& unit : plan.units) {
    for (const Group& group : unit.groups) {
      if (!has_gradient(group)) continue;
      for (const ParamLayout& p : group.params) {
        params[p.name] = {index, &group, &p};
        for (const std::string& alias : p.aliases) params[alias] = {index, &group, &p};
      }
      ++index;
    }
  }
  return params;
}

const SavedParam& counterpart(const std::map<std::string, SavedParam>& saved, const Group& group,
                              const ParamLayout& p) {
  auto found = saved.find(p.name);
  for (size_t a = 0; found == saved.end() && a < p.aliases.size(); ++a) {
    found = saved.find(p.aliases[a]);
  }
  if (found == saved.end()) {
    fail(ExitCode::kUsage, "parameter " + p.name +
                               " is trained by the new plan but the checkpoint's plan holds no "
                               "trained parameter of that name; reshard only between plans of "
                               "the same model");
  }
  const SavedParam& s = found->second;
  if (s.param->shape != p.shape || s.layout->dtype != group.dtype) {
    fail(ExitCode::kUsage, "parameter " + p.name +
                               " has another shape or dtype in the checkpoint's plan than in the "
                               "new one; reshard only between plans of the same model");
  }
  return s;
}

}  // namespace

std::vector<ShardCopy> shard_copies(const Plan& saved, const Plan& target, int64_t target_shard) {
  const std::map<std::string, SavedParam> by_name = trainable_params_by_name(saved);
  std::vector<int64_t> saved_numels = trainable_shard_numels(saved);
  std::vector<ShardCopy> copies;
  size_t to_group = 0;
  for (const Unit& unit : target.units) {
    for (const Group& group : unit.groups) {
      if (!has_gradient(group)) continue;
      const int64_t lo = target_shard * group.shard_numel;
      const int64_t hi = lo + group.shard_numel;
      for (const ParamLayout& p : group.params) {
        const SavedParam& s = counterpart(by_name, group, p);
        const int64_t begin = std::max(lo, p.offset);
        const int64_t end = std::min(hi, p.offset + p.numel);
        // [begin, end) of the target's flat group is [from, from + end - begin) of the saved
        // one, which may straddle several saved shards.
        const int64_t n = saved_numels[s.group];
        for (int64_t at = begin; at < end;) {
          const int64_t from = s.param->offset + (at - p.offset);
          const int64_t shard = from / n;
          const int64_t run = std::min(end - at, (shard + 1) * n - from);
          copies.push_back({to_group, at - lo, s.group, shard, from - shard * n, run});
          at += run;
        }
      }
      ++to_group;
    }
  }
  std::sort(copies.begin(), copies.end(), [](const ShardCopy& a, const ShardCopy& b) {
    return std::tie(a.from_shard, a.from_group, a.from_offset, a.to_group, a.to_offset) <
           std::tie(b.from_shard, b.from_group, b.from_offset, b.to_group, b.to_offset);
  });
  std::vector<ShardCopy> merged;
  for (const ShardCopy& c : copies) {
    if (!merged.empty()) {
      ShardCopy& last = merged.back();
      if (last.from_shard == c.from_shard && last.from_group == c.from_group &&
          last.to_group == c.to_group && last.from_offset + last.numel == c.from_offset &&
          last.to_offset + last.numel == c.to_offset) {
        last.numel += c.numel;
        continue;
      }
    }
    merged.push_back(c);
  }
  return merged;
}

std::vector<int64_t> saved_shards_read(const std::vector<ShardCopy>& copies) {
  std::vector<int64_t> shards;
  for (const ShardCopy& c : copies) {
    if (shards.empty() || shards.back() != c.from_shard) shards.push_back(c.from_shard);
  }
  return shards;
}

std::vector<int64_t> trainable_shard_numels(const Plan& plan) {
  std::vector<int64_t> numels;
  for (const Unit& unit : plan.units) {
    for (const Group& group : unit.groups) {
      if (has_gradient(group)) numels.push_back(group.shard_numel);
    }
  }
  return numels;
}

}  // namespace mfsdp::schema
