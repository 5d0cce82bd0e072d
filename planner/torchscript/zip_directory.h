#pragma once
// The central directory of a zip archive (a TorchScript file is one): every record's name,
// size, CRC-32 and where its bytes lie, read without touching the records themselves. Ranks
// compare its digest instead of hashing a model file of any size (docs/plan-format.md, "What
// the model hash covers"). Zip64 archives (files or records over 4 GiB) included. No LibTorch.

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::planner {

struct ZipRecord {
  std::string name;            // as stored, with the archive's top-level folder ("model/data/0")
  uint32_t crc32 = 0;          // of the uncompressed bytes, as the writer computed it
  uint64_t size = 0;           // uncompressed bytes
  uint64_t stored = 0;         // compressed bytes (equal to size for a stored record)
  uint16_t method = 0;         // 0: stored (what torch.jit.save writes), 8: deflated
  uint64_t header_offset = 0;  // of the record's local header in the file
};

struct ZipDirectory {
  uint64_t file_size = 0;
  std::vector<ZipRecord> records;  // in directory order
  // Lower-case hex SHA-256 of the file size and the central directory's bytes: names, sizes,
  // CRC-32s and offsets of every record, so two files with different content differ in it
  // (but for a CRC-32 collision in a record of equal size and name).
  std::string digest;
};

// Reads the end-of-directory records and the central directory of `path`. Every size and
// offset is checked against the file: Error(kModel) naming the file when it is not a zip
// archive, is truncated, or its directory is inconsistent; Error(kIo) when it cannot be read.
ZipDirectory read_zip_directory(const std::string& path);

// The same from an archive's bytes held in memory (what the fuzz target drives).
ZipDirectory parse_zip_directory(const unsigned char* data, uint64_t size, const std::string& path);

}  // namespace mfsdp::planner
