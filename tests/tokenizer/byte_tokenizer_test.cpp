// Tests of the byte-level tokenizer: exact round trip on random bytes, EOS, range errors.
#include "tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace echo::tokenizer {
namespace {

TEST(ByteTokenizer, RoundTripsRandomBytes) {
  const auto tok = load_tokenizer("byte");
  std::mt19937 rng(1234);
  for (int len : {0, 1, 2, 7, 255, 4096, 65537}) {
    std::string text(len, '\0');
    for (char& c : text) c = static_cast<char>(rng() & 0xFF);
    const std::vector<int32_t> ids = tok->encode(text);
    ASSERT_EQ(ids.size(), text.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(text[i]));
    EXPECT_EQ(tok->decode(ids), text);
  }
}

TEST(ByteTokenizer, EosIsId256AndNeverComesFromText) {
  const auto tok = load_tokenizer("byte");
  EXPECT_EQ(tok->eos_id(), 256);
  EXPECT_EQ(tok->vocab_size(), 257);
  // The literal text stays bytes, so any byte string round-trips.
  EXPECT_EQ(tok->encode("<|endoftext|>").size(), 13u);
  const std::vector<int32_t> ids = {'h', 'i', 256, 'x'};
  EXPECT_EQ(tok->decode(ids), "hi<|endoftext|>x");
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocab) {
  const auto tok = load_tokenizer("byte");
  const std::vector<int32_t> too_big = {'a', 257};
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(tok->decode(too_big), echo::Error);
  EXPECT_THROW(tok->decode(negative), echo::Error);
}

}  // namespace
}  // namespace echo::tokenizer
