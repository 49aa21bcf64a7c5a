// Communication-error telemetry (ours; docs/design.md §10). At each site k of a pass:
//   δ_k = -Σ_i u_{k,i}        the error the quantized all-reduce injected   (Eqn. 4)
//   ρ_k = ŷ_k - Σ_i x_{k,i}    the net error the site adds (δ_k + C_k)      (Eqn. 5)
//   S_t = Σ_{k≤t} ρ_k          the partial sum Theorem 1 bounds             (Eqn. 6)
// The group sums are formed with one exact fp32 all-reduce per site, so telemetry costs
// communication and is only gathered when enabled.
#pragma once

#include <string>
#include <vector>

#include "comm/all_reduce.h"

namespace echo::comm {

struct SiteTelemetry {
  Site site;
  int bits = 0;
  int rescale_exponent = 0;  // e of the backward 2^e rescaling (0 on forward sites)
  double delta_norm = 0;     // ‖δ_k‖
  double x_norm = 0;         // ‖Σ_i x_{k,i}‖, the exact sum of the uncompensated contributions
  double partial_sum_norm = 0;  // ‖S_k‖
};

// One JSON object per line: {"kind":"echo_site","step":..,"direction":..,"site":..,...}.
std::string to_json_line(const SiteTelemetry& t, long step);

// Accumulates S_t over the sites of one pass.
class TelemetryPass {
 public:
  void reset() { partial_sum_.clear(); records_.clear(); }
  // exact_sum_x = Σ_i x_i, sum_u = Σ_i u_i (both over the group), y = the all-reduce output.
  const SiteTelemetry& record(Site site, int bits, int rescale_exponent, const float* exact_sum_x, const float* sum_u,
                              const float* y, size_t n);
  const std::vector<SiteTelemetry>& records() const { return records_; }

 private:
  std::vector<double> partial_sum_;
  std::vector<SiteTelemetry> records_;
};

}  // namespace echo::comm
