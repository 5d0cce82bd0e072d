#pragma once
// Plan dtype names ("float32", "bfloat16", ...) as NCCL element types, and NCCL unique ids as
// text for the rendezvous store.

#include <nccl.h>

#include <string>
#include <utility>
#include <vector>

namespace mfsdp::executor {

// float32, float64, float16, bfloat16, int64, int32, int8 and uint8 map to NCCL's types.
// Throws Error(kUsage) for a dtype NCCL cannot carry (bool, int16) or an unknown name.
ncclDataType_t nccl_dtype(const std::string& dtype);

// 2 * NCCL_UNIQUE_ID_BYTES lowercase hex digits, and back (Error(kInternal) when malformed).
std::string encode_unique_id(const ncclUniqueId& id);
ncclUniqueId decode_unique_id(const std::string& hex);

// What one rank publishes in the id exchange: "name=hex;name=hex" for the groups it leads
// (names may not contain '=' or ';'), and the id published under `name`, "" when absent.
std::string publish_unique_ids(const std::vector<std::pair<std::string, std::string>>& ids);
std::string find_unique_id(const std::string& published, const std::string& name);

}  // namespace mfsdp::executor
