// The order of the packed samples within one epoch: a uniformly random permutation of [0, n)
// drawn from a 64-bit seed, identical on every machine.
//
// Algorithm. Fisher-Yates (Knuth's Algorithm P): for i = n-1 down to 1 swap element i with
// element j, j uniform in [0, i]. j comes from Lemire's multiply-and-reject bounded draw ("Fast
// random integer generation in an interval", 2019), exact (no modulo bias), fed by the 32-bit
// words of Philox4x32-10 (core/philox.h) at counters (t, kShuffleStreamTag, 0, 0), t = 0, 1, ...,
// under the key philox_key(seed). No std::shuffle or std::uniform_int_distribution: their
// results are implementation-defined, and the order must be reproducible for resume.
// Cost: O(n) time once per epoch and 4 bytes per sample (n < 2^32 is checked).
#pragma once

#include <cstdint>
#include <vector>

namespace echo::data {

class SamplePermutation {
 public:
  SamplePermutation(uint64_t n, uint64_t seed);

  uint64_t size() const { return order_.size(); }
  // The element at position i of the permuted order, for i < size().
  uint64_t operator()(uint64_t i) const;

 private:
  std::vector<uint32_t> order_;  // (n)
};

}  // namespace echo::data
