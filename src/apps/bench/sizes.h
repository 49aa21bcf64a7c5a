// Message-size ranges for benchmarks, written as nccl-tests users expect: "1K..256M" (powers
// of the step factor from the first to the last), a single size "64M", or a list "1K,4K,1M".
// Suffixes K, M, G are powers of 1024.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace echo::bench {

size_t parse_size(const std::string& text);  // "256M" -> 268435456; throws echo::Error naming the text
std::vector<size_t> parse_sizes(const std::string& spec, size_t step_factor = 2);
std::string format_size(size_t bytes);       // 268435456 -> "256M"

}  // namespace echo::bench
