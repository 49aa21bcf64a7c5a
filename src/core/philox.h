// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// Random123 reference constants) as ECHO_HD functions, plus the uniform-float and 7-bit S3R
// threshold helpers. Counter-based: the same (counter, key) gives the same numbers on the
// host and in a kernel, in any order, which is what makes S3R thresholds reproducible under
// any TP/DP factorization (docs/design.md §11).
#pragma once

#include "core/hd.h"

namespace echo {

struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};
using PhiloxOutput = PhiloxCounter;  // four 32-bit words

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multiplier applied to counter word 0
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // multiplier applied to counter word 2
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key bump (golden ratio)
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // key bump (sqrt(3) - 1)
constexpr int kPhiloxRounds = 10;

// hi:lo = a * b. The host path uses one 64-bit multiply, the device path __umulhi; both exact.
ECHO_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  lo = a * b;
  hi = __umulhi(a, b);
#else
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
#endif
}

ECHO_HD PhiloxCounter philox4x32_round(PhiloxCounter c, PhiloxKey k) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(kPhiloxM0, c.v[0], hi0, lo0);
  philox_mulhilo(kPhiloxM1, c.v[2], hi1, lo1);
  return PhiloxCounter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}

// Philox4x32-10: ten rounds, the key bumped by (W0, W1) before every round after the first.
ECHO_HD PhiloxOutput philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  ctr = philox4x32_round(ctr, key);
  for (int r = 1; r < kPhiloxRounds; ++r) {
    key.v[0] += kPhiloxW0;
    key.v[1] += kPhiloxW1;
    ctr = philox4x32_round(ctr, key);
  }
  return ctr;
}

// The key for a 64-bit run seed: low word first.
ECHO_HD PhiloxKey philox_key(uint64_t seed) {
  return PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// A uniform float in [0, 1): the top 24 bits of `word` times 2^-24, so every value is exact in
// fp32, 0 maps to 0.0f and 0xffffffff to 1 - 2^-24 (never 1.0f).
ECHO_HD float philox_uniform(uint32_t word) { return static_cast<float>(word >> 8) * 5.9604644775390625e-08f; }

// S3R thresholds: four 7-bit codes per 32-bit word. Code j (j = 0..3) is bits [8j, 8j+6] of the
// word, i.e. k = (word >> (8*j)) & 0x7f; bit 8j+7 of each byte is unused. The threshold is
// half-step shifted, R = (k + 0.5) / 128, so R lies in {0.5/128, ..., 127.5/128}, never 0 or 1,
// and its mean over the 128 codes is exactly 0.5.
constexpr int kThresholdsPerWord = 4;
constexpr int kThresholdBits = 7;

ECHO_HD uint32_t s3r_threshold_code(uint32_t word, int j) { return (word >> (8 * j)) & 0x7fu; }

ECHO_HD float s3r_threshold(uint32_t word, int j) {
  return (static_cast<float>(s3r_threshold_code(word, j)) + 0.5f) * 0.0078125f;  // 1/128, exact
}

}  // namespace echo
