// The per-element arithmetic of the Echo compensator (paper Algorithm 1, Eqns. 10-11), as
// ECHO_HD functions so the CPU reference and the fused CUDA path compute identical values.
#pragma once

#include "core/hd.h"

namespace echo::comm {

struct CompensatorCoeffs {
  float eta = 0.75f;   // gain: 0 = no compensation, 1 = full (Theorem 1)
  float a = 0.35f;     // blend of the fast and slow averages
  float beta1 = 0.7f;  // decay of the fast average
  float beta2 = 0.3f;  // decay of the slow average
};

// x' = x + η·(a·m1 + (1 - a)·m2)                                                   (Eqn. 10)
ECHO_HD float compensate(float x, float m1, float m2, const CompensatorCoeffs& k) {
  return x + k.eta * (k.a * m1 + (1.0f - k.a) * m2);
}

// u = x' - ŷ/P;  m_j <- β_j·m_j + (1 - β_j)·u                                      (Eqn. 11)
ECHO_HD float compensator_update(float x_comp, float y, float num_ranks, float& m1, float& m2,
                                 const CompensatorCoeffs& k) {
  const float u = x_comp - y / num_ranks;
  m1 = k.beta1 * m1 + (1.0f - k.beta1) * u;
  m2 = k.beta2 * m2 + (1.0f - k.beta2) * u;
  return u;
}

// μ_w = Σ_r r·w_r, the mean age at which an injected error is returned (Theorem 1).
inline double mean_return_age(const CompensatorCoeffs& k) {
  return k.a * k.beta1 / (1.0 - k.beta1) + (1.0 - k.a) * k.beta2 / (1.0 - k.beta2);
}

}  // namespace echo::comm
