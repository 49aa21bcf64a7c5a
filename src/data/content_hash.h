// The content fingerprint of an indexed dataset (docs/design.md §12, "Resume"): what a checkpoint
// records of its training data, so that a resume accepts the same data under another path (moved
// or copied to another filesystem) and refuses other data under the same path (re-prepared in
// place), which comparing paths got wrong both ways.
#pragma once

#include <cstdint>

#include "data/indexed_dataset.h"

namespace echo::data {

// XXH3-64 (seed 0) over the token dtype, the document boundaries and the stored token bytes:
// everything the loader's samples depend on, and nothing else (not the paths, nor the sequence
// split inside a document, which packing ignores). One pass over the .bin, at memory bandwidth.
uint64_t content_hash(const IndexedDataset& ds);

}  // namespace echo::data
