#include "executor/runtime/initializer.h"

#include <cmath>
#include <cstdlib>
#include <map>

#include "planner/torchscript/mapped_archive.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// splitmix64's finaliser: a bijection of 64-bit words whose outputs pass BigCrush as a
// counter-based generator.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string last_part(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

[[noreturn]] void bad_spec(const std::string& spec) {
  fail(ExitCode::kUsage, "--init " + spec +
                             ": expected normal:STD with STD a number above 0, e.g. --init "
                             "normal:0.02 (docs/large-models.md#initialiser)");
}

}  // namespace

Initializer::Rule Initializer::rule_for(const std::string& name,
                                        const std::vector<int64_t>& shape) {
  if (last_part(name) == "bias") return Rule::kZeros;
  if (shape.size() == 1) return Rule::kOnes;
  return Rule::kNormal;
}

Initializer::Initializer(const std::string& spec, uint64_t seed, const schema::Plan& plan)
    : seed_(seed) {
  const std::string prefix = "normal:";
  if (spec.compare(0, prefix.size(), prefix) != 0) bad_spec(spec);
  const std::string number = spec.substr(prefix.size());
  char* end = nullptr;
  std_ = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(std_) || std_ <= 0) bad_spec(spec);
  std::map<Rule, int> counts;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      for (const schema::ParamLayout& param : group.params)
        ++counts[rule_for(param.name, param.shape)];
    }
  }
  description_ = spec + " with seed " + std::to_string(seed) + ": " +
                 std::to_string(counts[Rule::kNormal]) + " weight(s) from normal(0, " + number +
                 "), " + std::to_string(counts[Rule::kZeros]) + " bias(es) zeros, " +
                 std::to_string(counts[Rule::kOnes]) + " 1-D weight(s) ones";
}

at::Tensor Initializer::slice(const schema::ParamLayout& param, int64_t first,
                              int64_t count) const {
  switch (rule_for(param.name, param.shape)) {
    case Rule::kZeros:
      return at::zeros({count});
    case Rule::kOnes:
      return at::ones({count});
    case Rule::kNormal:
      break;
  }
  at::Tensor out = at::empty({count});
  float* values = out.data_ptr<float>();
  const uint64_t key = fnv1a(param.name) ^ mix(seed_ + 0x9e3779b97f4a7c15ULL);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kScale = 1.0 / 4294967296.0;  // 2^-32
  for (int64_t i = 0; i < count; ++i) {
    // Element e's word, then Box-Muller on its two halves (each in (0, 1)).
    const uint64_t e = static_cast<uint64_t>(first + i);
    const uint64_t word = mix(key + (e + 1) * 0x9e3779b97f4a7c15ULL);
    const double u1 = (static_cast<double>(word >> 32) + 0.5) * kScale;
    const double u2 = (static_cast<double>(word & 0xffffffffULL) + 0.5) * kScale;
    values[i] = static_cast<float>(std_ * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
  return out;
}

void Initializer::load_buffers(torch::jit::Module& module) const {
  at::NoGradGuard no_grad;
  std::vector<std::string> unknown;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    if (!planner::has_no_data(b.value)) continue;
    const std::string part = last_part(b.name);
    if (part != "running_mean" && part != "running_var" && part != "num_batches_tracked") {
      unknown.push_back(b.name);
      continue;
    }
    planner::allocate_missing_data(b.value);
    b.value.fill_(part == "running_var" ? 1 : 0);
  }
  if (!unknown.empty()) {
    std::string names;
    for (size_t i = 0; i < unknown.size() && i < 5; ++i) names += (i ? ", " : "") + unknown[i];
    if (unknown.size() > 5) names += ", and " + std::to_string(unknown.size() - 5) + " more";
    fail(ExitCode::kUsage, "--init gives parameters values, but the skeleton's buffer(s) " + names +
                               " hold none and have no rule; start from --init-from WEIGHTS "
                               "that have them, or from the model file with values");
  }
}

}  // namespace mfsdp::executor
