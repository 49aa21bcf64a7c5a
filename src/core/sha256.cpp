// core/sha256.h over OpenSSL's EVP digest interface (libcrypto), checked against the FIPS 180-4
// test vectors in sha256_test.
#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace echo {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : ctx_(new Context) {
  ctx_->md = EVP_MD_CTX_new();
  if (ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1) return;
  // The destructor does not run for a constructor that throws: free here.
  EVP_MD_CTX_free(ctx_->md);
  delete ctx_;
  ECHO_FAIL("OpenSSL could not start a SHA-256 digest");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(ctx_->md);
  delete ctx_;
}

void Sha256::update(const void* data, size_t bytes) {
  ECHO_CHECK(EVP_DigestUpdate(ctx_->md, data, bytes) == 1, "OpenSSL SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ECHO_CHECK(EVP_DigestFinal_ex(ctx_->md, digest, &len) == 1 && len == 32, "OpenSSL SHA-256 final failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 s;
  s.update(bytes.data(), bytes.size());
  return s.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ECHO_INPUT_CHECK(in.good(), "cannot read '{}': {}", path, std::strerror(errno));
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  ECHO_INPUT_CHECK(!in.bad(), "cannot read '{}': {}", path, std::strerror(errno));
  return s.hex_digest();
}

}  // namespace echo
