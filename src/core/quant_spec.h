// What a quantized transfer is: the policy, the bit width and the group size. It lives in core
// because the config, the host QAR and the CUDA kernels all name it; it has no dependencies.
#pragma once

#include <cstdint>

namespace echo {

enum class QuantPolicy : uint8_t { symmetric, asym_naive, asym_zero_aware };

struct QuantSpec {
  QuantPolicy policy = QuantPolicy::asym_zero_aware;
  int bits = 4;          // 4 or 8
  int group_size = 128;  // a power of two
};

}  // namespace echo
