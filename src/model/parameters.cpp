// Parameter storage and the seed-determined initialisation.
#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/philox.h"

namespace echo::model {

double init_normal(uint64_t seed, uint64_t param_index, uint64_t global_index) {
  const PhiloxCounter ctr{{static_cast<uint32_t>(global_index), static_cast<uint32_t>(global_index >> 32),
                           static_cast<uint32_t>(param_index), 0x1a17u}};
  const PhiloxCounter r = philox4x32_10(ctr, philox_key(seed));
  // 32-bit uniforms in (0, 1): the +0.5 keeps log() away from 0.
  const double u1 = (static_cast<double>(r.v[0]) + 0.5) / 4294967296.0;
  const double u2 = (static_cast<double>(r.v[1]) + 0.5) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

template <class T>
ParameterSet<T>::ParameterSet(const Qwen3Plan& plan, const ModelShape& shape) : shape_(&shape) {
  params_.resize(plan.params.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    p.spec = &plan.params[i];
    p.shape = p.spec->local_shape(shape.tp);
    p.value.assign(static_cast<size_t>(p.spec->local_numel(shape.tp)), T(0));
    p.grad.assign(p.value.size(), T(0));
  }
}

template <class T>
void ParameterSet<T>::init(uint64_t seed) {
  const double output_std = shape_->scale_output_init
                                ? shape_->init_std / std::sqrt(2.0 * static_cast<double>(shape_->layers))
                                : shape_->init_std;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (p.spec->init == InitKind::ones) {
      std::fill(p.value.begin(), p.value.end(), T(1));
      continue;
    }
    const double std = p.spec->init == InitKind::normal_output ? output_std : shape_->init_std;
    for (size_t e = 0; e < p.value.size(); ++e) {
      const int64_t g = p.spec->global_index(static_cast<int64_t>(e), shape_->tp, shape_->tp_rank);
      p.value[e] = static_cast<T>(std * init_normal(seed, i, static_cast<uint64_t>(g)));
    }
  }
}

template <class T>
void ParameterSet<T>::zero_grads() {
  for (auto& p : params_) std::fill(p.grad.begin(), p.grad.end(), T(0));
}

template class ParameterSet<float>;
template class ParameterSet<double>;

}  // namespace echo::model
