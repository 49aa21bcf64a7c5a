// check_token_range: the start-up scan that every token id of a dataset lies in [0, vocab_size)
// (docs/design.md §5: an id >= vocab_size in data is an error, never a silent embedding read).
#include "data/token_range.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "data/content_hash.h"

namespace echo::data {
namespace {

// Index of the first token outside [0, vocab) in `tokens`, or tokens.size(). The hot loop only
// ORs a flag so it vectorizes; the position is searched for only once something is wrong.
template <class T>
size_t first_out_of_range(std::span<const T> tokens, int64_t vocab) {
  bool bad = false;
  for (const T t : tokens) bad |= static_cast<int64_t>(t) < 0 || static_cast<int64_t>(t) >= vocab;
  if (!bad) return tokens.size();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (static_cast<int64_t>(tokens[i]) < 0 || static_cast<int64_t>(tokens[i]) >= vocab) return i;
  return tokens.size();
}

// Tokens per chunk: 1 MiB of int32 ids, small enough to stay in L2 between the check and the hash.
constexpr size_t kChunkTokens = size_t{1} << 18;

// The first out-of-range position in tokens [first, first + count) of the flat array, or count.
size_t first_out_of_range_in(const IndexedDataset& ds, uint64_t first, size_t count, int64_t vocab, int64_t& id) {
  const uint8_t* bytes = ds.token_bytes().data();
  if (ds.dtype() == TokenDtype::kInt32) {
    const std::span<const int32_t> tokens(reinterpret_cast<const int32_t*>(bytes) + first, count);
    const size_t pos = first_out_of_range(tokens, vocab);
    if (pos < count) id = tokens[pos];
    return pos;
  }
  const std::span<const uint16_t> tokens(reinterpret_cast<const uint16_t*>(bytes) + first, count);
  const size_t pos = first_out_of_range(tokens, vocab);
  if (pos < count) id = tokens[pos];
  return pos;
}

// The range check, chunk by chunk, handing each checked chunk to `hasher` when there is one.
void scan(const IndexedDataset& ds, int64_t vocab_size, const std::string& name, ContentHasher* hasher) {
  ECHO_CHECK(vocab_size > 0, "{} ({}): vocab_size must be positive, got {}", name, ds.bin_path(), vocab_size);
  const uint64_t num_tokens = ds.num_tokens();
  const size_t item = bytes_per_token(ds.dtype());
  for (uint64_t first = 0; first < num_tokens; first += kChunkTokens) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(kChunkTokens, num_tokens - first));
    int64_t id = 0;
    const size_t pos = first_out_of_range_in(ds, first, count, vocab_size, id);
    if (pos < count) {
      // Documents tile the flat array (IndexedDataset::open checks it): the one holding the token
      // is the last whose offset is <= its index (empty documents share the next one's offset).
      const uint64_t token = first + pos;
      const auto offsets = ds.document_offsets();
      const size_t doc =
          static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), token) - offsets.begin()) - 1;
      ECHO_INPUT_FAIL(
          "{} ({}): document {}, position {}: token id {} is out of range [0, {}) ('model.vocab_size' = {})", name,
          ds.bin_path(), doc, token - offsets[doc], id, vocab_size, vocab_size);
    }
    if (hasher != nullptr) hasher->add_tokens(ds.token_bytes().subspan(first * item, count * item));
  }
}

}  // namespace

void check_token_range(const IndexedDataset& ds, int64_t vocab_size, const std::string& name) {
  scan(ds, vocab_size, name, nullptr);
}

uint64_t check_token_range_and_hash(const IndexedDataset& ds, int64_t vocab_size, const std::string& name) {
  ContentHasher hasher(ds);
  scan(ds, vocab_size, name, &hasher);
  return hasher.digest();
}

}  // namespace echo::data
