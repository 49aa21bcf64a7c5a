// Backward power-of-two rescaling (Echo paper Sec. 5.4, Appendix C): gradients are multiplied
// by 2^e, with e chosen from the group-wide max so that gmax·2^e lies in [2^10, 2^11), before
// the quantized all-reduce, and divided by it after. Exact, because the factor is a power of
// two; it keeps small gradients from underflowing the fp16 group scale.
#pragma once

#include <cmath>

#include "core/hd.h"

namespace echo::comm {

// e such that gmax·2^e ∈ [2^10, 2^11); 0 when gmax is 0 (or not a positive finite number).
ECHO_HD int rescale_exponent(float gmax) {
  if (!(gmax > 0.0f) || !(gmax <= 3.402823466e38f)) return 0;
  int ex = 0;
  frexpf(gmax, &ex);  // gmax = m·2^ex, m ∈ [0.5, 1)  ->  floor(log2 gmax) = ex - 1
  return 11 - ex;
}

}  // namespace echo::comm
