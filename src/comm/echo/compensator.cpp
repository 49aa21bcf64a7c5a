// Compensator state handling; the arithmetic is compensator_math.h.
#include "comm/echo/compensator.h"

#include "core/error.h"

namespace echo::comm {

void Compensator::reset() { sized_ = false; }

void Compensator::prepare(size_t n, const char* site_name) {
  if (!sized_) {
    m1_.assign(n, 0.0f);
    m2_.assign(n, 0.0f);
    sized_ = true;
  }
  ECHO_CHECK(n == m1_.size(),
             "the compensator at {} got {} elements but this pass started with {}: every site of a pass must "
             "all-reduce tensors of one size",
             site_name, n, m1_.size());
}

void Compensator::apply(std::span<const float> x, std::span<float> x_comp, const char* site_name) {
  prepare(x.size(), site_name);
  for (size_t i = 0; i < x.size(); ++i) x_comp[i] = compensate(x[i], m1_[i], m2_[i], coeffs_);
}

void Compensator::update(std::span<const float> x_comp, std::span<const float> y, int num_ranks) {
  const float p = static_cast<float>(num_ranks);
  for (size_t i = 0; i < x_comp.size(); ++i) compensator_update(x_comp[i], y[i], p, m1_[i], m2_[i], coeffs_);
}

}  // namespace echo::comm
