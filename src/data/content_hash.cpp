// content_hash: XXH3-64 of a dataset's dtype, document offsets and tokens (see content_hash.h).
#include "data/content_hash.h"

#include <xxhash.h>

#include "core/error.h"

namespace echo::data {

void ContentHasher::FreeState::operator()(XXH3_state_s* state) const { XXH3_freeState(state); }

ContentHasher::ContentHasher(const IndexedDataset& ds) : prefix_(ds.prefix()), state_(XXH3_createState()) {
  ECHO_CHECK(state_ != nullptr && XXH3_64bits_reset(state_.get()) == XXH_OK, "{}: cannot start an XXH3 hash", prefix_);
  const uint8_t dtype = static_cast<uint8_t>(ds.dtype());
  add(&dtype, 1);
  const auto offsets = ds.document_offsets();
  add(offsets.data(), offsets.size_bytes());
}

void ContentHasher::add(const void* bytes, size_t size) {
  ECHO_CHECK(XXH3_64bits_update(state_.get(), bytes, size) == XXH_OK, "{}: XXH3 hash update failed", prefix_);
}

void ContentHasher::add_tokens(std::span<const uint8_t> bytes) {
  if (!bytes.empty()) add(bytes.data(), bytes.size());
}

uint64_t ContentHasher::digest() const { return XXH3_64bits_digest(state_.get()); }

uint64_t content_hash(const IndexedDataset& ds) {
  ContentHasher hasher(ds);
  hasher.add_tokens(ds.token_bytes());
  return hasher.digest();
}

}  // namespace echo::data
