// check_token_range: the start-up scan that every token id of a dataset lies in [0, vocab_size)
// (docs/design.md §5: an id >= vocab_size in data is an error, never a silent embedding read).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"

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

}  // namespace

void check_token_range(const IndexedDataset& ds, int64_t vocab_size, const std::string& name) {
  ECHO_CHECK(vocab_size > 0, "{} ({}): vocab_size must be positive, got {}", name, ds.bin_path(), vocab_size);
  for (size_t doc = 0; doc < ds.num_documents(); ++doc) {
    size_t pos;
    int64_t id = 0;
    if (ds.dtype() == TokenDtype::kInt32) {
      const auto tokens = ds.document(doc);
      pos = first_out_of_range(tokens, vocab_size);
      if (pos < tokens.size()) id = tokens[pos];
    } else {
      const auto tokens = ds.document_u16(doc);
      pos = first_out_of_range(tokens, vocab_size);
      if (pos < tokens.size()) id = tokens[pos];
    }
    ECHO_INPUT_CHECK(pos == ds.document_length(doc),
                     "{} ({}): document {}, position {}: token id {} is out of range [0, {}) ('model.vocab_size' = {})",
                     name, ds.bin_path(), doc, pos, id, vocab_size, vocab_size);
  }
}

}  // namespace echo::data
