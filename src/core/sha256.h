// SHA-256 (FIPS 180-4): a file's fingerprint that a user can compare with `sha256sum` (the
// dataset sidecar records its tokenizer.json's; scripts/get_data.sh pins files by the same hash).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace echo {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

// The SHA-256 of a file's contents, read in chunks. Throws echo::InputError naming `path` when
// it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace echo
