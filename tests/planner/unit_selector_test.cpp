#include "planner/unit_selector.h"

#include <gtest/gtest.h>

#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::IrBuilder;
using Kind = UnitSelector::Kind;

ModelIR twelve_layers() {
  IrBuilder b;
  b.module("embed", "__torch__.Embedding")
      .module("layers", "__torch__.torch.nn.modules.container.ModuleList");
  for (int i = 0; i < 12; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    b.module(layer, "__torch__.model.Block").module(layer + ".attn", "__torch__.model.Attention");
  }
  b.module("head", "__torch__.Linear");
  return b.build();
}

// The units' names: module paths, a merged unit's joined by '+'.
std::vector<std::string> paths(const ModelIR& ir, const std::vector<std::vector<int>>& units) {
  std::vector<std::string> out;
  for (const std::vector<int>& unit : units)
    out.push_back(schema::unit_name_of(module_paths(ir, unit)));
  return out;
}

TEST(UnitSelector, StarMatchesOneSegmentDoubleStarAny) {
  EXPECT_TRUE(path_matches("layers.*", "layers.3"));
  EXPECT_FALSE(path_matches("layers.*", "layers.3.attn"));
  EXPECT_FALSE(path_matches("layers.*", "layers"));
  EXPECT_TRUE(path_matches("layers.*.attn", "layers.3.attn"));
  EXPECT_TRUE(path_matches("**.attn", "layers.3.attn"));
  EXPECT_TRUE(path_matches("**.attn", "attn"));
  EXPECT_TRUE(path_matches("layers.**", "layers"));
  EXPECT_TRUE(path_matches("layers.1*", "layers.11"));
  EXPECT_FALSE(path_matches("layers.1*", "layers.2"));
  EXPECT_TRUE(path_matches("<root>", ""));
  EXPECT_TRUE(path_matches("", ""));
  EXPECT_FALSE(path_matches("<root>", "layers"));
  EXPECT_FALSE(path_matches("*", ""));
}

TEST(UnitSelector, TypeMatchesShortOrQualifiedName) {
  EXPECT_TRUE(type_matches("Block", "__torch__.model.Block"));
  EXPECT_TRUE(type_matches("__torch__.model.Block", "__torch__.model.Block"));
  EXPECT_FALSE(type_matches("Bloc", "__torch__.model.Block"));
}

TEST(UnitSelector, GlobMatchesRegisterInDefinitionOrderNotLexical) {
  const ModelIR ir = twelve_layers();
  const auto picked = select_units(ir, {{Kind::kPath, "layers.*"}});
  ASSERT_EQ(picked.size(), 12u);
  EXPECT_EQ(paths(ir, picked)[9], "layers.9");
  EXPECT_EQ(paths(ir, picked)[10], "layers.10");
}

TEST(UnitSelector, SelectorsRegisterInFlagOrder) {
  const ModelIR ir = twelve_layers();
  const auto picked =
      select_units(ir, {{Kind::kPath, "head"}, {Kind::kType, "Attention"}, {Kind::kPath, ""}});
  const auto names = paths(ir, picked);
  ASSERT_EQ(names.size(), 14u);
  EXPECT_EQ(names.front(), "head");
  EXPECT_EQ(names[1], "layers.0.attn");
  EXPECT_EQ(names.back(), "<root>");
}

TEST(UnitSelector, SelectorMatchingNothingFailsWithHint) {
  EXPECT_MFSDP_ERROR(select_units(twelve_layers(), {{Kind::kPath, "blocks.*"}}),
                     ExitCode::kPlanning,
                     "--unit 'blocks.*' matches no module; the model's top-level modules are: "
                     "embed, layers, head");
  EXPECT_MFSDP_ERROR(select_units(twelve_layers(), {{Kind::kType, "Mlp"}}), ExitCode::kPlanning,
                     "--unit-type 'Mlp' matches no module; types in the model: Attention, Block");
}

TEST(UnitSelector, OverlappingSelectorsFail) {
  EXPECT_MFSDP_ERROR(
      select_units(twelve_layers(), {{Kind::kPath, "layers.*"}, {Kind::kType, "Block"}}),
      ExitCode::kPlanning, "--unit 'layers.*' and --unit-type 'Block' both select module layers.0");
}

TEST(UnitSelector, AutoShardsModuleListElementsThenTheModel) {
  const ModelIR ir = twelve_layers();
  const auto names = paths(ir, one_module_units(auto_units(ir)));
  ASSERT_EQ(names.size(), 13u);
  EXPECT_EQ(names.front(), "layers.0");
  EXPECT_EQ(names[11], "layers.11");
  EXPECT_EQ(names.back(), "<root>");
}

}  // namespace
}  // namespace mfsdp::planner
