// Wall-clock laps for splitting a call's time into its parts (the all-reduce engines' and the
// int8 linear layers' times), and the monotonic clock and limits as plain integers for timeouts
// kept in atomics or passed to device waits (the collective watchdog, the cuda_ipc transport).
#pragma once

#include <chrono>
#include <cstdint>

namespace echo {

// Nanoseconds on the steady clock (an arbitrary epoch: only differences mean anything).
inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A limit in seconds as nanoseconds in an int64: 0 (off) for a limit <= 0 or NaN; a positive one
// under 1 ns stays a limit (1 ns: it fires at once, never "off", which the device waits read as
// no timeout); one past ~285 years (or inf) is clamped to 9e18 ns, as good as none (the cast of a
// larger double is undefined: on x86 it gave a negative number).
inline int64_t limit_ns(double seconds) {
  constexpr double kLongest = 9.0e18;  // ns
  if (!(seconds > 0)) return 0;
  const double ns = seconds * 1e9;
  return ns < 1.0 ? 1 : static_cast<int64_t>(ns < kLongest ? ns : kLongest);
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
