// The quantizer's command-line values, checked where a benchmark parses them: the same ranges
// as the config's comm.bits and comm.group_size (core/config/schema.h), so that a benchmark
// measures what a run can use, and a bad value is an input error naming the flag instead of the
// quantizer's internal check.
#pragma once

#include "core/error.h"

namespace echo::bench {

constexpr int kMinGroupSize = 2;        // comm.group_size: a power of two in [2, 2^20]
constexpr int kMaxGroupSize = 1 << 20;

inline void check_quant_bits(const char* flag, int bits) {
  ECHO_INPUT_CHECK(bits == 4 || bits == 8, "{} must be 4 or 8, as comm.bits (got {})", flag, bits);
}

inline void check_group_size(const char* flag, int group_size) {
  ECHO_INPUT_CHECK(group_size >= kMinGroupSize && group_size <= kMaxGroupSize && (group_size & (group_size - 1)) == 0,
                   "{} must be a power of two from {} to {}, as comm.group_size (got {})", flag, kMinGroupSize,
                   kMaxGroupSize, group_size);
}

}  // namespace echo::bench
