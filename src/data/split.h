// The train/valid split used by echo_prep: each document goes to one side by a keyed hash of its
// index, so the split is by documents, stable (the same document always lands on the same side
// for a given seed, whatever else is in the corpus) and identical on every machine.
#pragma once

#include <cstdint>

namespace echo::data {

// True when document `doc_index` belongs to the validation set: a uniform u in [0, 1) drawn from
// Philox4x32-10 of the index under `seed` is below valid_fraction (so 0 never, 1 always, and the
// expected fraction is valid_fraction). Throws unless 0 <= valid_fraction <= 1.
bool is_valid_document(uint64_t doc_index, double valid_fraction, uint64_t seed);

}  // namespace echo::data
