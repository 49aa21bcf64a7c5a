// Parameter storage and the seed-determined initialisation.
#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <thread>

#include "core/lane_pool.h"
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
ParameterSet<T>::ParameterSet(const Qwen3Plan& plan, const ModelShape& shape, backend::Backend& backend, Pass pass)
    : shape_(&shape), backend_(&backend) {
  constexpr DType dtype = master_dtype<T>();
  const DType compute_dtype = backend.activation_dtype(dtype);
  const int64_t total = local_parameter_count(plan, shape.tp);
  values_ = backend.zeros({total}, dtype);
  if (pass == Pass::training) grads_ = backend.zeros({total}, dtype);
  if (compute_dtype != dtype) compute_values_ = backend.zeros({total}, compute_dtype);
  params_.resize(plan.params.size());
  int64_t at = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    p.spec = &plan.params[i];
    p.shape = p.spec->local_shape(shape.tp);
    const int64_t n = p.spec->local_numel(shape.tp);
    p.value = values_.slice(0, at, at + n).view(p.shape);
    if (grads_.defined()) p.grad = grads_.slice(0, at, at + n).view(p.shape);
    p.compute = compute_values_.defined() ? compute_values_.slice(0, at, at + n).view(p.shape) : p.value;
    at += n;
  }
}

namespace {
int init_threads(int64_t elements) {
  // One thread per 4 M values up to the cores (16 at most): a 0.6B model's 600 M draws take ~45 s
  // on one core. Small models, and so every CPU test and the quickstart, stay on the caller's.
  constexpr int64_t kValuesPerThread = int64_t{4} << 20;
  const int64_t cores = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  return static_cast<int>(std::clamp<int64_t>(elements / kValuesPerThread, 1, cores));
}
}  // namespace

template <class T>
void ParameterSet<T>::init(uint64_t seed, int threads) {
  const double output_std = shape_->scale_output_init
                                ? shape_->init_std / std::sqrt(2.0 * static_cast<double>(shape_->layers))
                                : shape_->init_std;
  Tensor host = values_.is_cpu() ? values_ : Tensor::empty(values_.shape(), values_.dtype());
  T* out = host.template data<T>();
  const int lanes = threads > 0 ? threads : init_threads(values_.numel());
  std::optional<LanePool> pool;
  if (lanes > 1) pool.emplace(lanes);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    T* v = out + (p.value.storage_offset() - values_.storage_offset());
    const int64_t n = p.numel();
    if (p.spec->init == InitKind::ones) {
      std::fill(v, v + n, T(1));
      continue;
    }
    const double std = p.spec->init == InitKind::normal_output ? output_std : shape_->init_std;
    // Each value depends only on (seed, i, its global index), so any split gives the same bits.
    const auto draw = [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        const int64_t g = p.spec->global_index(e, shape_->tp, shape_->tp_rank);
        v[e] = static_cast<T>(std * init_normal(seed, i, static_cast<uint64_t>(g)));
      }
    };
    if (pool)
      pool->run([&](int lane) { draw(n * lane / lanes, n * (lane + 1) / lanes); });
    else
      draw(0, n);
  }
  if (!values_.is_cpu()) backend_->copy_from(values_, host);
  refresh_compute_weights();
}

template <class T>
void ParameterSet<T>::zero_grads() {
  ECHO_CHECK(grads_.defined(), "zero_grads() of parameters built for evaluation, which have no gradients");
  backend_->fill(grads_, 0.0);
}

template <class T>
void ParameterSet<T>::refresh_compute_weights() {
  if (compute_values_.defined()) backend_->cast(compute_values_, values_);
}

template class ParameterSet<float>;
template class ParameterSet<double>;

}  // namespace echo::model
