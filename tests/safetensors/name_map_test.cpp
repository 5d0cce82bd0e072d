// --name-map (docs/large-models.md#name-maps): rules tried in order, wildcards that carry their
// matches over, skipped tensors, and one line for every way a map can be wrong.
#include "safetensors/name_map.h"

#include <gtest/gtest.h>

#include "schema/error.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::safetensors {
namespace {

using mfsdp::testing::error_of;

const char* kGpt2Map = R"({"rules": [
  {"file": "h.*.attn.c_attn.weight", "model": "layers.*.attn.qkv.weight", "transpose": true},
  {"file": "h.*.attn.bias", "model": null},
  {"file": "h.*.mlp.c_fc.*", "model": "layers.*.mlp.fc.*"},
  {"file": "**.ln_*.weight", "model": "**.norm_*.scale"},
  {"file": "**", "model": "transformer.**"}
]})";

TEST(NameMap, TheFirstRuleThatMatchesRenamesAndWildcardsCarryTheirMatches) {
  const NameMap map = NameMap::parse(kGpt2Map, "map.json");
  EXPECT_EQ(map.size(), 5u);
  Renamed r = map.apply("h.11.attn.c_attn.weight");
  EXPECT_EQ(r.name, "layers.11.attn.qkv.weight");
  EXPECT_TRUE(r.transpose);
  r = map.apply("h.0.attn.bias");
  EXPECT_FALSE(r.name.has_value());  // skipped: not the model's
  r = map.apply("h.3.mlp.c_fc.bias");
  EXPECT_EQ(r.name, "layers.3.mlp.fc.bias");
  EXPECT_FALSE(r.transpose);
  EXPECT_EQ(map.apply("h.2.ln_1.weight").name, "h.2.norm_1.scale");  // ** spans dots
  EXPECT_EQ(map.apply("wte.weight").name, "transformer.wte.weight");
  // * is one part of a name: "h.1.2.attn.c_attn.weight" is not layer 1.2's.
  EXPECT_EQ(map.apply("h.1.2.attn.c_attn.weight").name, "transformer.h.1.2.attn.c_attn.weight");
  // Regex characters in a pattern are literal.
  const NameMap dots = NameMap::parse(R"({"rules": [{"file": "a.b", "model": "x"}]})", "m");
  EXPECT_EQ(dots.apply("a.b").name, "x");
  EXPECT_EQ(dots.apply("aXb").name, "aXb");
  // Without rules every name stays.
  EXPECT_EQ(NameMap().apply("h.0.attn.bias").name, "h.0.attn.bias");
}

TEST(NameMap, AMapThatIsWrongIsOneLineNamingTheFileAndTheRule) {
  const std::string how = " (docs/large-models.md#name-maps)";
  const std::pair<const char*, std::string> cases[] = {
      {R"([1])", "map.json: expected an object with one key, \"rules\", a list"},
      {R"({"rules": [], "extra": 1})",
       "map.json: expected an object with one key, \"rules\", a list"},
      {R"({"rules": [3]})", "map.json: rules[0] is not an object"},
      {R"({"rules": [{"file": "a", "model": "b", "tranpose": true}]})",
       "map.json: rules[0] has key \"tranpose\"; a rule has \"file\", \"model\" and \"transpose\""},
      {R"({"rules": [{"model": "b"}]})", "map.json: rules[0] needs \"file\", a name pattern"},
      {R"({"rules": [{"file": "a"}]})",
       "map.json: rules[0] needs \"model\", a name pattern or null (skip)"},
      {R"({"rules": [{"file": "a", "model": "b", "transpose": 1}]})",
       "map.json: rules[0]: \"transpose\" is true or false"},
      {R"({"rules": [{"file": "a", "model": "b"}, {"file": "h.*", "model": "l.**"}]})",
       "map.json: rules[1]: \"l.**\" must have the wildcards of \"h.*\", in the same order (* is "
       "one part of a name, ** one or more)"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    const Error e = error_of([&] { NameMap::parse(text, "map.json"); });
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()), message + how);
  }
  const Error e = error_of([] { NameMap::parse("{\"rules\": [", "map.json"); });
  EXPECT_EQ(std::string(e.what()).rfind("map.json: not JSON: ", 0), 0u) << e.what();
  EXPECT_EQ(error_of([] { NameMap::load("/nonexistent/map.json"); }).what(),
            std::string("--name-map /nonexistent/map.json: cannot be read"));
}

}  // namespace
}  // namespace mfsdp::safetensors
