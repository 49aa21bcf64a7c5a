// Message-size ranges for benchmarks, written as nccl-tests users expect: "1K..256M" (powers
// of the step factor from the first to the last), a single size "64M", or a list "1K,4K,1M".
// Suffixes K, M, G are powers of 1024. Sizes are positive decimal integers and never exceed
// the caller's maximum, so a typo cannot make a benchmark allocate until memory runs out.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace echo::bench {

// "256M" -> 268435456. Throws echo::Error naming the text when it is not a positive size,
// overflows, or exceeds max_bytes (named `max_name` in the message, e.g. "echo_bench's limit").
size_t parse_size(const std::string& text, size_t max_bytes = static_cast<size_t>(-1),
                  const std::string& max_name = "the largest size");
std::vector<size_t> parse_sizes(const std::string& spec, size_t step_factor = 2,
                                size_t max_bytes = static_cast<size_t>(-1),
                                const std::string& max_name = "the largest size");
// Refuses (echo::InputError naming `option` and the size) a size that is not a whole number of
// 16-bit values: the benchmarks' sizes are bytes of a bf16 message, and an odd byte would be
// dropped from the count while the table still showed it.
void require_16bit_values(const std::vector<size_t>& sizes, const std::string& option);
// Refuses (echo::InputError naming the size) a message of fewer 16-bit values than one codec group
// of `group_size`: each call would quantize one partial group, not time the codec at that size.
void require_one_group(const std::vector<size_t>& sizes, int group_size);
std::string format_size(size_t bytes);  // 268435456 -> "256M"

}  // namespace echo::bench
