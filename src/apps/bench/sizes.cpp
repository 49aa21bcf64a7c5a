// Size-range parsing for echo_bench.
#include "apps/bench/sizes.h"

#include <cctype>
#include <limits>

#include "core/error.h"

namespace echo::bench {

size_t parse_size(const std::string& text, size_t max_bytes, const std::string& max_name) {
  // NOTE: std::stoull accepts "-4" (and wraps it to 2^64 - 4) and leading blanks; only a plain
  // run of digits is a size here.
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  ECHO_INPUT_CHECK(!text.empty() && text[0] != '-', "size '{}' must be positive", text);
  ECHO_INPUT_CHECK(digits > 0, "'{}' is not a size (expected a number with an optional K, M or G suffix, e.g. 256M)", text);
  const std::string suffix = text.substr(digits);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = size_t{1} << 30;
  else ECHO_INPUT_CHECK(suffix.empty(), "'{}' has an unknown size suffix '{}' (use K, M or G)", text, suffix);
  const std::string number = text.substr(0, digits);
  // Beyond 20 digits the value cannot fit in 64 bits; compare digit strings before converting.
  const bool fits = number.size() < 20 || (number.size() == 20 && number <= "18446744073709551615");
  const unsigned long long value = fits ? std::stoull(number) : std::numeric_limits<unsigned long long>::max();
  ECHO_INPUT_CHECK(value > 0, "size '{}' must be positive", text);
  ECHO_INPUT_CHECK(fits && value <= max_bytes / mult, "size '{}' exceeds {}, {} bytes ({})", text, max_name, max_bytes,
             format_size(max_bytes));
  return static_cast<size_t>(value) * mult;
}

std::vector<size_t> parse_sizes(const std::string& spec, size_t step_factor, size_t max_bytes,
                                const std::string& max_name) {
  ECHO_INPUT_CHECK(step_factor >= 2, "the size step factor must be >= 2, got {}", step_factor);
  std::vector<size_t> sizes;
  const auto range = spec.find("..");
  if (range != std::string::npos) {
    // An empty end would be blamed on a size '' the user never typed.
    ECHO_INPUT_CHECK(range > 0 && range + 2 < spec.size() && spec.find("..", range + 2) == std::string::npos,
                     "size range '{}' needs one size on each side of '..' (e.g. 1M..256M)", spec);
    const size_t lo = parse_size(spec.substr(0, range), max_bytes, max_name);
    const size_t hi = parse_size(spec.substr(range + 2), max_bytes, max_name);
    ECHO_INPUT_CHECK(lo <= hi, "size range '{}' runs backwards", spec);
    // Stop before s * step_factor could wrap around (hi <= max_bytes keeps the list short).
    for (size_t s = lo;; s *= step_factor) {
      sizes.push_back(s);
      if (s > hi / step_factor) break;
    }
    return sizes;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const auto comma = spec.find(',', start);
    ECHO_INPUT_CHECK(comma != start && start != spec.size(),
                     "size list '{}' has an empty entry (sizes are separated by single commas, e.g. 1K,4K,1M)", spec);
    sizes.push_back(
        parse_size(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start), max_bytes, max_name));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

void require_16bit_values(const std::vector<size_t>& sizes, const std::string& option) {
  for (size_t bytes : sizes)
    ECHO_INPUT_CHECK(bytes % 2 == 0,
                     "{}: {} bytes is not a whole number of 16-bit values (sizes are bytes of a bf16 "
                     "message); give an even size",
                     option, bytes);
}

void require_one_group(const std::vector<size_t>& sizes, int group_size) {
  for (const size_t bytes : sizes)
    ECHO_INPUT_CHECK(bytes / 2 >= static_cast<size_t>(group_size),
                     "--sizes {} holds {} 16-bit values, fewer than one group of --group-size {}: each call would "
                     "quantize one partial group; give sizes of at least {} or a smaller --group-size",
                     format_size(bytes), bytes / 2, group_size, format_size(static_cast<size_t>(group_size) * 2));
}

std::string format_size(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

}  // namespace echo::bench
