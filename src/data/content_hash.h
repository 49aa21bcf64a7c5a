// The content fingerprint of an indexed dataset (docs/design.md §12, "Resume"): what a checkpoint
// records of its training data, so that a resume accepts the same data under another path (moved
// or copied to another filesystem) and refuses other data under the same path (re-prepared in
// place), which comparing paths got wrong both ways.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "data/indexed_dataset.h"

struct XXH3_state_s;  // xxhash.h's hash state, used through a pointer only

namespace echo::data {

// XXH3-64 (seed 0) over the token dtype, the document boundaries and the stored token bytes:
// everything the loader's samples depend on, and nothing else (not the paths, nor the sequence
// split inside a document, which packing ignores). One pass over the .bin, at memory bandwidth.
uint64_t content_hash(const IndexedDataset& ds);

// content_hash taken piece by piece, so a scan that reads the tokens for another reason
// (check_token_range) hashes them on the same pass: the constructor adds the dtype and the
// document boundaries, add_tokens the token bytes in order, digest() is content_hash(ds) once
// every token byte was added.
class ContentHasher {
 public:
  explicit ContentHasher(const IndexedDataset& ds);

  void add_tokens(std::span<const uint8_t> bytes);
  uint64_t digest() const;

 private:
  void add(const void* bytes, size_t size);

  struct FreeState {
    void operator()(XXH3_state_s* state) const;
  };
  std::string prefix_;  // names the dataset in an error
  std::unique_ptr<XXH3_state_s, FreeState> state_;
};

}  // namespace echo::data
