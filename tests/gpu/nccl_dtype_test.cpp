#include "executor/comm/nccl_dtype.h"

#include <gtest/gtest.h>

#include <cstring>

#include "schema/error.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

TEST(NcclDtype, PlanDtypesMapToNcclTypes) {
  EXPECT_EQ(nccl_dtype("float32"), ncclFloat32);
  EXPECT_EQ(nccl_dtype("bfloat16"), ncclBfloat16);
  EXPECT_EQ(nccl_dtype("float16"), ncclFloat16);
  EXPECT_EQ(nccl_dtype("float64"), ncclFloat64);
  EXPECT_EQ(nccl_dtype("int64"), ncclInt64);
  EXPECT_EQ(nccl_dtype("int32"), ncclInt32);
  EXPECT_EQ(nccl_dtype("int8"), ncclInt8);
  EXPECT_EQ(nccl_dtype("uint8"), ncclUint8);
}

TEST(NcclDtype, RefusesDtypesNcclCannotCarry) {
  for (const char* dtype : {"bool", "int16", "float8", ""}) {
    try {
      nccl_dtype(dtype);
      FAIL() << dtype << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_TRUE(starts_with(e.what(),
                              std::string("dtype ") + dtype + " cannot be communicated with NCCL"));
    }
  }
}

TEST(NcclUniqueId, RoundTripsThroughHex) {
  ncclUniqueId id{};
  for (size_t i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) id.internal[i] = static_cast<char>(i * 7 + 1);
  const std::string hex = encode_unique_id(id);
  ASSERT_EQ(hex.size(), 2u * NCCL_UNIQUE_ID_BYTES);
  EXPECT_EQ(hex.substr(0, 8), "01080f16");
  const ncclUniqueId back = decode_unique_id(hex);
  EXPECT_EQ(std::memcmp(back.internal, id.internal, NCCL_UNIQUE_ID_BYTES), 0);
}

TEST(NcclUniqueId, RejectsMalformedText) {
  const std::string good(2 * NCCL_UNIQUE_ID_BYTES, 'a');
  EXPECT_NO_THROW(decode_unique_id(good));
  for (const std::string& bad : {good.substr(1), good + "a", std::string("g") + good.substr(1),
                                 std::string("A") + good.substr(1)}) {
    try {
      decode_unique_id(bad);
      FAIL() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kInternal);
      EXPECT_TRUE(starts_with(e.what(), "malformed NCCL unique id"));
    }
  }
}

TEST(NcclUniqueId, PublishedListsFindIdsByExactName) {
  const std::string text = publish_unique_ids({{"all_gather.0", "ab"}, {"control", "cd"}});
  EXPECT_EQ(text, "all_gather.0=ab;control=cd");
  EXPECT_EQ(find_unique_id(text, "all_gather.0"), "ab");
  EXPECT_EQ(find_unique_id(text, "control"), "cd");
  EXPECT_EQ(find_unique_id(text, "all_gather"), "");
  EXPECT_EQ(find_unique_id(text, "control.1"), "");
  EXPECT_EQ(find_unique_id("", "control"), "");
  EXPECT_EQ(publish_unique_ids({}), "");
  EXPECT_THROW(publish_unique_ids({{"a=b", "ab"}}), Error);
  EXPECT_THROW(publish_unique_ids({{"a;b", "ab"}}), Error);
}

}  // namespace
}  // namespace mfsdp::executor
