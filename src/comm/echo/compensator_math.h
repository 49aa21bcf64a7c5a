// The per-element arithmetic of the Echo compensator (paper Algorithm 1, Eqns. 10-11), as
// ECHO_HD functions so the CPU reference and the fused CUDA path compute identical values.
#pragma once

#include "core/hd.h"

namespace echo::comm {

struct CompensatorCoeffs {
  float eta = 0.75f;   // gain: 0 = no compensation, 1 = full (Theorem 1)
  float a = 0.35f;     // weight of the m1 average; m2 gets 1 - a
  float beta1 = 0.7f;  // decay of m1, the slow average (long memory: mean age β/(1-β) = 2.33 sites)
  float beta2 = 0.3f;  // decay of m2, the fast average (mean age 0.43 sites)
};

// The arithmetic goes through the once-rounded helpers of core/hd.h: nvcc would otherwise
// contract a·b + c into an FMA and the fused CUDA path would drift from the CPU reference.

// x' = x + η·(a·m1 + (1 - a)·m2)                                                   (Eqn. 10)
ECHO_HD float compensate(float x, float m1, float m2, const CompensatorCoeffs& k) {
  const float blend = add_rn(mul_rn(k.a, m1), mul_rn(sub_rn(1.0f, k.a), m2));
  return add_rn(x, mul_rn(k.eta, blend));
}

// u = x' - ŷ/P;  m_j <- β_j·m_j + (1 - β_j)·u                                      (Eqn. 11)
ECHO_HD float compensator_update(float x_comp, float y, float num_ranks, float& m1, float& m2,
                                 const CompensatorCoeffs& k) {
  const float u = sub_rn(x_comp, div_rn(y, num_ranks));
  m1 = add_rn(mul_rn(k.beta1, m1), mul_rn(sub_rn(1.0f, k.beta1), u));
  m2 = add_rn(mul_rn(k.beta2, m2), mul_rn(sub_rn(1.0f, k.beta2), u));
  return u;
}

// μ_w = Σ_r r·w_r, the mean age at which an injected error is returned (Theorem 1).
inline double mean_return_age(const CompensatorCoeffs& k) {
  return k.a * k.beta1 / (1.0 - k.beta1) + (1.0 - k.a) * k.beta2 / (1.0 - k.beta2);
}

}  // namespace echo::comm
