// The byte-level tokenizer: bytes are ids 0..255, id 256 decodes to <|endoftext|>.
#include "tokenizer/byte_tokenizer.h"

#include "core/error.h"

namespace echo::tokenizer {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    ECHO_CHECK(id >= 0 && id < kVocabSize, "byte tokenizer: id {} at position {} is outside [0, {})", id, i,
               kVocabSize);
    if (id == kEosId) {
      out.append(kEosText);
    } else {
      out.push_back(static_cast<char>(id));
    }
  }
  return out;
}

}  // namespace echo::tokenizer
