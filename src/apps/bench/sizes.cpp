// Size-range parsing for echo_bench.
#include "apps/bench/sizes.h"

#include <cctype>

#include "core/error.h"

namespace echo::bench {

size_t parse_size(const std::string& text) {
  size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    ECHO_FAIL("'{}' is not a size (expected a number with an optional K, M or G suffix, e.g. 256M)", text);
  }
  std::string suffix = text.substr(pos);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = size_t{1} << 30;
  else ECHO_CHECK(suffix.empty(), "'{}' has an unknown size suffix '{}' (use K, M or G)", text, suffix);
  ECHO_CHECK(value > 0, "size '{}' must be positive", text);
  return static_cast<size_t>(value) * mult;
}

std::vector<size_t> parse_sizes(const std::string& spec, size_t step_factor) {
  ECHO_CHECK(step_factor >= 2, "the size step factor must be >= 2, got {}", step_factor);
  std::vector<size_t> sizes;
  const auto range = spec.find("..");
  if (range != std::string::npos) {
    const size_t lo = parse_size(spec.substr(0, range)), hi = parse_size(spec.substr(range + 2));
    ECHO_CHECK(lo <= hi, "size range '{}' runs backwards", spec);
    for (size_t s = lo; s <= hi; s *= step_factor) sizes.push_back(s);
    return sizes;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const auto comma = spec.find(',', start);
    sizes.push_back(parse_size(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

std::string format_size(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

}  // namespace echo::bench
