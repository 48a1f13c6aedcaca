// CRC-32 (zlib's) and size of whole files, so a run can name exactly which weights it started from (the start-up table
// and config.json list each base weight file with its checksum). Reads the file once, in 8 MiB blocks.
// Also the state slots' integrity sums (core/state_slots.cpp checks each slot file against slot.json with it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vdt {

struct FileChecksum {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  std::string crc_hex() const;  // 8 lowercase hex digits
};

// Errors name the file and the failing call.
FileChecksum file_checksum(const std::string& path);
std::vector<FileChecksum> file_checksums(const std::vector<std::string>& paths);

}  // namespace vdt
