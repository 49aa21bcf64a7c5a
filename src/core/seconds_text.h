// A duration in seconds for a message: three significant digits below 1000 s, whole seconds
// above. A fixed "{:.0f}" or "{:.1f}" turned a sub-second comm.peer_timeout_s (0.001) into
// "no progress for 0 s"; "{:g}" alone writes 1.23e+03 for a long wait.
#pragma once

#include <fmt/format.h>

#include <string>

namespace echo {

inline std::string seconds_text(double seconds) {
  return seconds < 999.5 ? fmt::format("{:.3g}", seconds) : fmt::format("{:.0f}", seconds);
}

}  // namespace echo
