// This rank's shards of every parameter, with their gradients, laid out by the TP plan.
// Templated on the scalar so the same model runs in double for finite-difference tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/tp_plan.h"

namespace echo::model {

template <class T>
struct Parameter {
  const ParamSpec* spec = nullptr;
  std::vector<int64_t> shape;  // local shape
  std::vector<T> value;
  std::vector<T> grad;
};

template <class T>
class ParameterSet {
 public:
  ParameterSet(const Qwen3Plan& plan, const ModelShape& shape);

  // Weights from the seed as if the full tensor were drawn and then sharded: element e of a
  // parameter is a function of (seed, parameter index, global index of e) only, so tp = 1,
  // 2 and 4 start from identical weights.
  void init(uint64_t seed);
  void zero_grads();

  size_t size() const { return params_.size(); }
  Parameter<T>& operator[](size_t i) { return params_[i]; }
  const Parameter<T>& operator[](size_t i) const { return params_[i]; }
  T* value(size_t i) { return params_[i].value.data(); }
  const T* value(size_t i) const { return params_[i].value.data(); }
  T* grad(size_t i) { return params_[i].grad.data(); }

 private:
  const ModelShape* shape_;
  std::vector<Parameter<T>> params_;
};

// The N(0, 1) draw behind init(): Box-Muller on one Philox4x32-10 word pair.
double init_normal(uint64_t seed, uint64_t param_index, uint64_t global_index);

}  // namespace echo::model
