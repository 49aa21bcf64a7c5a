// The start-up scan of a dataset's tokens (docs/design.md §5 and §12): every id in the model's
// vocabulary, and the data's content hash taken on the same pass.
#pragma once

#include <cstdint>
#include <string>

#include "data/indexed_dataset.h"

namespace echo::data {

// Every token id must lie in [0, vocab_size): the model's true vocabulary (model.vocab_size), not
// the padded embedding rows, which no tokenizer emits. Reads all tokens once, in chunks (memory
// bandwidth bound). Throws echo::InputError naming `name` (the role, e.g. "data.train"), the .bin
// file, the document, the position in the document and the id of the first offending token.
void check_token_range(const IndexedDataset& ds, int64_t vocab_size, const std::string& name);

// The same check, returning content_hash(ds) (data/content_hash.h) taken on the same pass: each
// chunk is hashed while in cache, so a dataset larger than the page cache is read from disk once,
// not twice. For the training data, whose hash a checkpoint records; the other datasets skip the
// hash's cost.
uint64_t check_token_range_and_hash(const IndexedDataset& ds, int64_t vocab_size, const std::string& name);

}  // namespace echo::data
