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
  // Sizes the state at a pass's first site (zeros); throws when n differs from the size this pass
  // started with.
  void prepare(size_t n, const char* site_name);
  // x_comp = x + c (prepare() included).
  void apply(std::span<const float> x, std::span<float> x_comp, const char* site_name);
  // u = x_comp - y/P, and the two averages take it in.
  void update(std::span<const float> x_comp, std::span<const float> y, int num_ranks);

  const CompensatorCoeffs& coeffs() const { return coeffs_; }
  std::span<const float> m1() const { return m1_; }
  std::span<const float> m2() const { return m2_; }
  // The state itself, for the fused path (fused_echo_site.h), which applies and updates it per tile.
  float* m1_data() { return m1_.data(); }
  float* m2_data() { return m2_.data(); }

 private:
  CompensatorCoeffs coeffs_;
  std::vector<float> m1_, m2_;
  bool sized_ = false;
};

}  // namespace echo::comm
