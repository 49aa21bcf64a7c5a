// Wall-clock laps for splitting a call's time into its parts (the all-reduce engines' times).
#pragma once

#include <chrono>

namespace echo {

class Stopwatch {
 public:
  // Seconds since construction or the previous lap; starts the next lap.
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace echo
