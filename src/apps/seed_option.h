// The check of a 64-bit seed option (--seed): CLI11 converts with strtoull, which reads "-1" as
// 18446744073709551615 and clamps a value past 2^64 - 1, so a typo ran with another seed silently.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>

namespace echo::apps {

// A CLI11 validator: decimal digits only, at most 2^64 - 1.
inline CLI::Validator unsigned_seed() {
  return CLI::Validator(
      [](std::string& text) {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) return text + " is above 2^64 - 1 = 18446744073709551615";
        if (text.empty() || error != std::errc() || stop != end) return text + " is not a whole number >= 0";
        return std::string();
      },
      "UINT64", "whole number in [0, 2^64 - 1]");
}

}  // namespace echo::apps
