// The largest inner dimension an int8 x int8 -> int32 product can sum without any chance of
// overflow: |C| <= k * 128^2 must fit in int32, so k <= 131071. The INT8 linears' GEMMs (CPU and
// CUDA) and the config check that refuses shapes beyond it share this one number.
#pragma once

#include <cstdint>

namespace echo {

inline constexpr int64_t kInt8GemmMaxK = 131071;
static_assert(kInt8GemmMaxK * 128 * 128 <= INT32_MAX && (kInt8GemmMaxK + 1) * 128 * 128 > INT32_MAX);

}  // namespace echo
