// SamplePermutation: Fisher-Yates over a Philox word stream with Lemire's exact bounded draw.
#include "data/sample_permutation.h"

#include <limits>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/philox.h"

namespace echo::data {
namespace {

// Counter word 1 tags the shuffle stream, so it never coincides with another Philox use of the
// same seed (the train/valid split tags its counters differently).
constexpr uint32_t kShuffleStreamTag = 0x53485546u;  // "SHUF"

// Successive 32-bit words of Philox4x32-10 under one key: four per counter value.
class PhiloxWords {
 public:
  explicit PhiloxWords(uint64_t seed) : key_(philox_key(seed)) {}
  uint32_t next() {
    if (used_ == 4) {
      block_ = philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(counter_), kShuffleStreamTag,
                                            static_cast<uint32_t>(counter_ >> 32), 0u}},
                             key_);
      ++counter_;
      used_ = 0;
    }
    return block_.v[used_++];
  }

 private:
  PhiloxKey key_;
  PhiloxOutput block_{};
  uint64_t counter_ = 0;
  int used_ = 4;
};

// Uniform in [0, range), range >= 1, exactly: a 32x32 -> 64-bit product whose high word is the
// draw, rejecting the (2^32 mod range) low words that would bias it (Lemire 2019).
uint32_t bounded(PhiloxWords& words, uint32_t range) {
  uint64_t m = static_cast<uint64_t>(words.next()) * range;
  uint32_t low = static_cast<uint32_t>(m);
  if (low < range) {
    const uint32_t threshold = (0u - range) % range;  // 2^32 mod range
    while (low < threshold) {
      m = static_cast<uint64_t>(words.next()) * range;
      low = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

}  // namespace

SamplePermutation::SamplePermutation(uint64_t n, uint64_t seed) {
  ECHO_CHECK(n > 0, "sample permutation of an empty range");
  ECHO_CHECK(n <= std::numeric_limits<uint32_t>::max(), "sample permutation: {} samples per epoch, at most 2^32 - 1",
             n);
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0u);
  PhiloxWords words(seed);
  for (uint64_t i = n - 1; i > 0; --i) {
    const uint32_t j = bounded(words, static_cast<uint32_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

uint64_t SamplePermutation::operator()(uint64_t i) const {
  ECHO_CHECK(i < order_.size(), "sample permutation: index {} out of range [0, {})", i, order_.size());
  return order_[i];
}

}  // namespace echo::data
