// Telemetry bookkeeping and its JSON-lines form.
#include "comm/echo/telemetry.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace echo::comm {

const SiteTelemetry& TelemetryPass::record(Site site, int bits, int rescale_exponent, const float* exact_sum_x,
                                           const float* sum_u, const float* y, size_t n) {
  if (partial_sum_.empty()) partial_sum_.assign(n, 0.0);
  ECHO_CHECK(partial_sum_.size() == n, "telemetry at {}: {} elements, but the pass started with {}", to_string(site),
             n, partial_sum_.size());
  double delta2 = 0, x2 = 0, s2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double delta = -static_cast<double>(sum_u[i]);
    const double rho = static_cast<double>(y[i]) - static_cast<double>(exact_sum_x[i]);
    partial_sum_[i] += rho;
    delta2 += delta * delta;
    x2 += static_cast<double>(exact_sum_x[i]) * exact_sum_x[i];
    s2 += partial_sum_[i] * partial_sum_[i];
  }
  records_.push_back({site, bits, rescale_exponent, std::sqrt(delta2), std::sqrt(x2), std::sqrt(s2)});
  return records_.back();
}

std::string to_json_line(const SiteTelemetry& t, long step) {
  nlohmann::json j = {{"kind", "echo_site"},
                      {"step", step},
                      {"direction", to_string(t.site.direction)},
                      {"site", t.site.index},
                      {"bits", t.bits},
                      {"rescale_exponent", t.rescale_exponent},
                      {"delta_norm", t.delta_norm},
                      {"x_norm", t.x_norm},
                      {"partial_sum_norm", t.partial_sum_norm}};
  return j.dump();
}

}  // namespace echo::comm
