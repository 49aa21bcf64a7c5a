// AdamW with fp32 master weights, gradients and moments (docs/design.md §12), on the parameters'
// backend (the moments are its tensors; the update is Backend::adamw_step). Weight decay applies
// to the parameters whose spec says so (matrices; not norms, not embeddings).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config/config.h"
#include "core/tensor.h"
#include "model/parameters.h"

namespace echo::train {

class AdamW {
 public:
  // Zero moments shaped like each parameter, from the parameters' backend.
  explicit AdamW(const model::ParameterSet<float>& params);

  // One update of every parameter with learning rate lr; the gradients must already be
  // clipped and averaged. Increments step_count().
  void step(model::ParameterSet<float>& params, double lr, const config::OptimConfig& cfg);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  // First and second moments of parameter i, shaped like its local shard.
  size_t size() const { return m_.size(); }
  Tensor& exp_avg(size_t i) { return m_[i]; }
  Tensor& exp_avg_sq(size_t i) { return v_[i]; }
  const Tensor& exp_avg(size_t i) const { return m_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return v_[i]; }

 private:
  int64_t step_ = 0;
  std::vector<Tensor> m_, v_;
};

}  // namespace echo::train
