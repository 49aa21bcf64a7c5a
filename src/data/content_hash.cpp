// content_hash: XXH3-64 of a dataset's dtype, document offsets and tokens (see content_hash.h).
#include "data/content_hash.h"

#include <xxhash.h>

#include <memory>

#include "core/error.h"

namespace echo::data {

uint64_t content_hash(const IndexedDataset& ds) {
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  ECHO_CHECK(state != nullptr && XXH3_64bits_reset(state.get()) == XXH_OK, "{}: cannot start an XXH3 hash",
             ds.prefix());
  const auto add = [&](const void* bytes, size_t size) {
    ECHO_CHECK(XXH3_64bits_update(state.get(), bytes, size) == XXH_OK, "{}: XXH3 hash update failed", ds.prefix());
  };
  const uint8_t dtype = static_cast<uint8_t>(ds.dtype());
  add(&dtype, 1);
  const auto offsets = ds.document_offsets();
  add(offsets.data(), offsets.size_bytes());
  const auto tokens = ds.token_bytes();
  if (!tokens.empty()) add(tokens.data(), tokens.size());
  return XXH3_64bits_digest(state.get());
}

}  // namespace echo::data
