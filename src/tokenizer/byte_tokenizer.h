// The byte-level tokenizer: one id per byte, plus <|endoftext|> as the EOS. Needs no files, so
// it is what the quickstart and most tests use.
#pragma once

#include "tokenizer/tokenizer.h"

namespace echo::tokenizer {

// NOTE: encode is the identity on bytes: a literal "<|endoftext|>" in the text stays 13 byte ids
// and never becomes id 256, so encode(decode(x)) == x for any ids below 256 and any byte string
// round-trips exactly. Only decode knows id 256.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEosId = 256;
  static constexpr int64_t kVocabSize = 257;
  static constexpr std::string_view kEosText = "<|endoftext|>";

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eos_id() const override { return kEosId; }
  std::string eos_source() const override { return "the byte tokenizer's <|endoftext|>"; }
  int64_t vocab_size() const override { return kVocabSize; }
};

}  // namespace echo::tokenizer
