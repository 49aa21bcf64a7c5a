// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
#include "train/adamw.h"

#include <cmath>

#include "backend/adamw_math.h"
#include "core/error.h"

namespace echo::train {

AdamW::AdamW(const model::ParameterSet<float>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    m_.push_back(params.backend().zeros(params[i].shape, DType::f32));
    v_.push_back(params.backend().zeros(params[i].shape, DType::f32));
  }
}

void AdamW::step(model::ParameterSet<float>& params, double lr, const config::OptimConfig& cfg) {
  ECHO_CHECK(params.size() == m_.size(), "the optimizer was built for {} parameters, got {}", m_.size(), params.size());
  ++step_;
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step_));
  backend::AdamWScalars s;
  s.beta1 = static_cast<float>(cfg.beta1);
  s.beta2 = static_cast<float>(cfg.beta2);
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.one_minus_beta2 = 1.0f - s.beta2;
  s.step_size = static_cast<float>(lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = static_cast<float>(cfg.eps);
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    const float decay = p.spec->weight_decay ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
    params.backend().adamw_step(p.value, p.grad, m_[i], v_[i], decay, s);
  }
  params.refresh_compute_weights();
}

}  // namespace echo::train
