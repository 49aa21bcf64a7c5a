// Compensate + rescale on load, unscale + update on finish.
#include "comm/echo/fused_echo_site.h"

#include "comm/echo/rescale.h"
#include "core/simd_clones.h"

namespace echo::comm {

namespace {

// NOTE: free functions over restrict pointers, so that the loops vectorize: through the members
// the compiler must assume a store to out may change m1_ itself. scale_pow2(v, e) is one multiply
// by 2^e wherever 2^e is a normal float (rescale.h), so `factor` gives its bits; the rare e outside
// that range takes the general path.
template <class Scale>
inline void load_loop(const float* __restrict x, const float* __restrict m1, const float* __restrict m2, size_t n,
                      const CompensatorCoeffs& k, Scale scale, float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = scale(compensate(x[i], m1[i], m2[i], k));
}

template <class Unscale>
inline void finish_loop(float* __restrict x, float* __restrict m1, float* __restrict m2, const float* __restrict y,
                        size_t n, const CompensatorCoeffs& k, float num_ranks, Unscale unscale) {
  for (size_t i = 0; i < n; ++i) {
    const float y_hat = unscale(y[i]);
    compensator_update(compensate(x[i], m1[i], m2[i], k), y_hat, num_ranks, m1[i], m2[i], k);
    x[i] = y_hat;
  }
}

bool normal_power_of_two(int e) { return e >= -126 && e <= 127; }
float power_of_two(int e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

ECHO_SIMD_CLONES void load_tile(const float* x, const float* m1, const float* m2, size_t n, CompensatorCoeffs k, int e,
                                float* out) {
  if (normal_power_of_two(e)) {
    const float f = power_of_two(e);
    load_loop(x, m1, m2, n, k, [f](float v) { return mul_rn(v, f); }, out);
  } else {
    load_loop(x, m1, m2, n, k, [e](float v) { return scale_pow2(v, e); }, out);
  }
}

ECHO_SIMD_CLONES void finish_tile(float* x, float* m1, float* m2, const float* y, size_t n, CompensatorCoeffs k,
                                  float num_ranks, int e) {
  if (e == 0) {  // forward sites: the unfused path skips the unscale too
    finish_loop(x, m1, m2, y, n, k, num_ranks, [](float v) { return v; });
  } else if (normal_power_of_two(-e)) {
    const float f = power_of_two(-e);
    finish_loop(x, m1, m2, y, n, k, num_ranks, [f](float v) { return mul_rn(v, f); });
  } else {
    finish_loop(x, m1, m2, y, n, k, num_ranks, [e](float v) { return scale_pow2(v, -e); });
  }
}

}  // namespace

FusedEchoSite::FusedEchoSite(Compensator& compensator, int num_ranks)
    : k_(compensator.coeffs()),
      m1_(compensator.m1_data()),
      m2_(compensator.m2_data()),
      num_ranks_(static_cast<float>(num_ranks)) {}

float FusedEchoSite::local_absmax(std::span<const float> x) const {
  float local = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) local = absmax_step(local, compensate(x[i], m1_[i], m2_[i], k_));
  return local;
}

void FusedEchoSite::load(const float* x, size_t begin, size_t n, float* out) const {
  load_tile(x + begin, m1_ + begin, m2_ + begin, n, k_, exponent_, out);
}

void FusedEchoSite::finish(float* x, size_t begin, size_t n, const float* y) {
  finish_tile(x + begin, m1_ + begin, m2_ + begin, y, n, k_, num_ranks_, exponent_);
}

}  // namespace echo::comm
