// is_valid_document: the keyed per-document train/valid coin (see split.h).
#include "data/split.h"

#include "core/error.h"
#include "core/philox.h"

namespace echo::data {
namespace {

// Counter word 2 tags this use of Philox, so the split never correlates with another stream
// drawn from the same seed (the loader's shuffle uses counter words {x, round, 0, 0}).
constexpr uint32_t kSplitStreamTag = 0x53504c54u;  // "SPLT"

}  // namespace

bool is_valid_document(uint64_t doc_index, double valid_fraction, uint64_t seed) {
  ECHO_CHECK(valid_fraction >= 0.0 && valid_fraction <= 1.0, "valid_fraction must be in [0, 1], got {}",
             valid_fraction);
  const PhiloxOutput r = philox4x32_10(
      PhiloxCounter{{static_cast<uint32_t>(doc_index), static_cast<uint32_t>(doc_index >> 32), kSplitStreamTag, 0u}},
      philox_key(seed));
  // 53 random bits -> a double in [0, 1), exact.
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) | (static_cast<uint64_t>(r.v[1]) >> 11);
  const double u = static_cast<double>(bits) * 0x1.0p-53;
  return u < valid_fraction;
}

}  // namespace echo::data
