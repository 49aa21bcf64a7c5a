// max |x| over a vector of doubles: the scale that relative error bounds in the tests divide by.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace echo::testing {

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace echo::testing
