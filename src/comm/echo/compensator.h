// Per-rank, per-direction state of the two-timescale compensator (Echo paper Sec. 5.1):
// two fp32 buffers m1, m2 shaped like the contribution, reset at the start of every pass.
#pragma once

#include <span>
#include <vector>

#include "comm/echo/compensator_math.h"

namespace echo::comm {

class Compensator {
 public:
  explicit Compensator(CompensatorCoeffs coeffs) : coeffs_(coeffs) {}

  // Forgets the state; the next call sizes it to its contribution and starts from zero.
  void reset();
  // x_comp = x + c. Throws when n differs from the size this pass started with.
  void apply(std::span<const float> x, std::span<float> x_comp, const char* site_name);
  // u = x_comp - y/P, and the two averages take it in.
  void update(std::span<const float> x_comp, std::span<const float> y, int num_ranks);

  const CompensatorCoeffs& coeffs() const { return coeffs_; }
  std::span<const float> m1() const { return m1_; }
  std::span<const float> m2() const { return m2_; }

 private:
  CompensatorCoeffs coeffs_;
  std::vector<float> m1_, m2_;
  bool sized_ = false;
};

}  // namespace echo::comm
