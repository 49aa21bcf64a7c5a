// This rank's shards of every parameter, with their gradients, laid out by the TP plan, in
// memory from the backend: all values in one flat tensor and all gradients in another (so the
// data-parallel gradient all-reduce is one call on one buffer, as Megatron's contiguous grad
// buffer), each parameter a view into both. Templated on the master scalar (float; double for
// the finite-difference tests on the CPU backend).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/pass.h"
#include "model/tp_plan.h"

namespace echo::model {

template <class T>
struct Parameter {
  const ParamSpec* spec = nullptr;
  std::vector<int64_t> shape;  // local shape
  Tensor value;                // master weights (dtype of T), a view into ParameterSet::values()
  Tensor grad;                 // same shape and dtype, a view into ParameterSet::grads()
  // The weights the ops read: `value` itself when the backend computes in the master dtype (CPU),
  // else a copy in its activation dtype, refreshed by ParameterSet::refresh_compute_weights.
  Tensor compute;

  int64_t numel() const { return value.numel(); }
  // Element access on a host-resident parameter (the CPU backend; tests, checkpoints).
  std::span<T> host_value() { return host_span<T>(value); }
  std::span<const T> host_value() const { return host_span<T>(value); }
  std::span<T> host_grad() { return host_span<T>(grad); }
  std::span<const T> host_grad() const { return host_span<T>(grad); }
  // Copies to the host, from either device.
  std::vector<T> value_vector() const { return value.to(Device::cpu).template to_vector<T>(); }
  std::vector<T> grad_vector() const { return grad.to(Device::cpu).template to_vector<T>(); }
};

template <class T>
class ParameterSet {
 public:
  // Pass::evaluation allocates no gradients (grad(i) and grads() are undefined tensors).
  ParameterSet(const Qwen3Plan& plan, const ModelShape& shape, backend::Backend& backend, Pass pass = Pass::training);
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;

  // Weights from the seed as if the full tensor were drawn and then sharded: element e of a
  // parameter is a function of (seed, parameter index, global index of e) only, so tp = 1,
  // 2 and 4 start from identical weights. Drawn on the host, then copied to the device; on
  // `threads` threads (0: one per 4 M values, up to the cores and 16), the same bits on any count.
  void init(uint64_t seed, int threads = 0);
  void zero_grads();
  // Recomputes the compute copies from the master weights (after an update or a load); a no-op
  // when they alias.
  void refresh_compute_weights();

  size_t size() const { return params_.size(); }
  Parameter<T>& operator[](size_t i) { return params_[i]; }
  const Parameter<T>& operator[](size_t i) const { return params_[i]; }
  // Master weight i, its gradient, and the copy the ops read.
  Tensor& value(size_t i) { return params_[i].value; }
  const Tensor& value(size_t i) const { return params_[i].value; }
  Tensor& grad(size_t i) { return params_[i].grad; }
  const Tensor& compute(size_t i) const { return params_[i].compute; }
  // Every value / gradient of this rank in parameter order, flat.
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  const Tensor& grads() const { return grads_; }
  backend::Backend& backend() const { return *backend_; }

 private:
  const ModelShape* shape_;
  backend::Backend* backend_;
  std::vector<Parameter<T>> params_;
  Tensor values_, grads_, compute_values_;
};

// The N(0, 1) draw behind init(): Box-Muller on one Philox4x32-10 word pair.
double init_normal(uint64_t seed, uint64_t param_index, uint64_t global_index);

// The dtype of T's tensors (f32 for float, f64 for double).
template <class T>
constexpr DType master_dtype() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "master weights are float or double");
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

}  // namespace echo::model
