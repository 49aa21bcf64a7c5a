// Wall-clock laps for splitting a call's time into its parts (the all-reduce engines' and the
// int8 linear layers' times), and the monotonic clock as a plain integer for timeouts kept in
// atomics (the collective watchdog).
#pragma once

#include <chrono>
#include <cstdint>

namespace echo {

// Nanoseconds on the steady clock (an arbitrary epoch: only differences mean anything).
inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Stopwatch {
 public:
  // Seconds since construction or the previous lap; starts the next lap.
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }
  // Adds the lap to *slot; a null slot (nobody asked for times) skips even the clock read.
  void lap_into(double* slot) {
    if (slot) *slot += lap();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace echo
