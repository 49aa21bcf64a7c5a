// Compensate + rescale on load, unscale + update on finish.
#include "comm/echo/fused_echo_site.h"

#include "comm/echo/rescale.h"

namespace echo::comm {

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
  for (size_t i = 0; i < n; ++i) out[i] = scale_pow2(compensate(x[begin + i], m1_[begin + i], m2_[begin + i], k_), exponent_);
}

void FusedEchoSite::finish(float* x, size_t begin, size_t n, const float* y) {
  for (size_t i = 0; i < n; ++i) {
    const size_t j = begin + i;
    const float y_hat = exponent_ != 0 ? scale_pow2(y[i], -exponent_) : y[i];
    const float x_comp = compensate(x[j], m1_[j], m2_[j], k_);
    compensator_update(x_comp, y_hat, num_ranks_, m1_[j], m2_[j], k_);
    x[j] = y_hat;
  }
}

}  // namespace echo::comm
