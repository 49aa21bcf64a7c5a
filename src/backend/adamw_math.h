// The AdamW element update (docs/design.md §12), shared by the CPU optimizer and the CUDA
// kernel: every operation rounded once (core/hd.h), so both give the same bits.
#pragma once

#include <cmath>

#include "core/hd.h"

namespace echo::backend {

// The per-step scalars, computed once on the host in double and rounded to float.
struct AdamWScalars {
  float beta1 = 0, beta2 = 0;
  float one_minus_beta1 = 0, one_minus_beta2 = 0;  // 1 - beta in float, as the update always used
  float step_size = 0;                             // lr / (1 - beta1^t)
  float inv_sqrt_bc2 = 0;                          // 1 / sqrt(1 - beta2^t)
  float eps = 0;
};

// m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  w <- w decay - step_size m / (sqrt(v) / sqrt(bc2) + eps).
ECHO_HD void adamw_update(float& w, float g, float& m, float& v, float decay, const AdamWScalars& s) {
  m = add_rn(mul_rn(s.beta1, m), mul_rn(s.one_minus_beta1, g));
  v = add_rn(mul_rn(s.beta2, v), mul_rn(mul_rn(s.one_minus_beta2, g), g));
#if defined(__CUDA_ARCH__)
  const float root = __fsqrt_rn(v);
#else
  const float root = std::sqrt(v);
#endif
  w = sub_rn(mul_rn(w, decay), div_rn(mul_rn(s.step_size, m), add_rn(mul_rn(root, s.inv_sqrt_bc2), s.eps)));
}

}  // namespace echo::backend
