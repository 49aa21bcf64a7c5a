// SHA-256 (FIPS 180-4, computed by OpenSSL's libcrypto): a file's fingerprint that a user can
// compare with `sha256sum` (the dataset sidecar records its tokenizer.json's; scripts/get_data.sh
// pins files by the same hash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace echo {

// Incremental hashing; not copyable (it owns an EVP_MD_CTX).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t bytes);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  struct Context;
  Context* ctx_;
};

std::string sha256_hex(std::string_view bytes);

// The SHA-256 of a file's contents, read in chunks. Throws echo::InputError naming `path` when
// it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace echo
