// SHA-256 against the FIPS 180-4 / NIST test vectors, split across update() calls at every
// offset of a block (the buffering), and a file's hash equal to its bytes' hash.
#include "core/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"

namespace echo {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, SplitUpdatesGiveTheSameDigest) {
  std::mt19937 gen(static_cast<unsigned>(::getpid()));
  std::string text(300, '\0');
  for (char& c : text) c = static_cast<char>(gen());
  const std::string whole = sha256_hex(text);
  for (size_t cut = 0; cut <= 130; ++cut) {
    Sha256 s;
    s.update(text.data(), cut);
    s.update(text.data() + cut, text.size() - cut);
    EXPECT_EQ(s.hex_digest(), whole) << cut;
  }
  text[gen() % text.size()] ^= 1;
  EXPECT_NE(sha256_hex(text), whole) << "one flipped bit changes the digest";
}

TEST(Sha256, FileDigestIsTheBytesDigest) {
  const auto path = std::filesystem::temp_directory_path() / ("echo_sha256_" + std::to_string(::getpid()));
  const std::string bytes(3 << 19, 'x');  // 1.5 MiB: more than one read chunk
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(sha256_file_hex(path.string()), sha256_hex(bytes));
  std::filesystem::remove(path);
  EXPECT_THROW(sha256_file_hex(path.string()), InputError);
}

}  // namespace
}  // namespace echo
