// AdamW with fp32 master weights, gradients and moments (docs/design.md §12). Weight decay
// applies to the parameters whose spec says so (matrices; not norms, not embeddings).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config/config.h"
#include "model/parameters.h"

namespace echo::train {

class AdamW {
 public:
  explicit AdamW(const model::ParameterSet<float>& params);

  // One update of every parameter with learning rate lr; the gradients must already be
  // clipped and averaged. Increments step_count().
  void step(model::ParameterSet<float>& params, double lr, const config::OptimConfig& cfg);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  // First and second moments, one vector per parameter, shaped like its local shard.
  std::vector<std::vector<float>>& exp_avg() { return m_; }
  std::vector<std::vector<float>>& exp_avg_sq() { return v_; }
  const std::vector<std::vector<float>>& exp_avg() const { return m_; }
  const std::vector<std::vector<float>>& exp_avg_sq() const { return v_; }

 private:
  int64_t step_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace echo::train
