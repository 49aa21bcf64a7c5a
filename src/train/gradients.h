// Gradient bookkeeping across ranks: the DP average (exact, identical on every replica), the
// global norm across TP and DP with replicated parameters counted once, clipping, and the
// non-finite check.
#pragma once

#include <memory>

#include "comm/all_reduce.h"
#include "core/config/config.h"
#include "dist/world.h"
#include "model/parameters.h"

namespace echo::train {

class GradientSync {
 public:
  // The DP sum runs over NCCL when run.device is cuda and every DP rank has its own GPU
  // (comm::make_exact_all_reduce), else exactly over MPI.
  GradientSync(const dist::World& world, config::Device device = config::Device::cpu);

  // grad <- mean over the DP group of grad. One exact fp32 all-reduce of the flat gradient
  // buffer, so every replica ends with the same bits and the replicas never drift.
  void average_over_dp(model::ParameterSet<float>& params);

  // sqrt(sum of squares of the full model's gradient): sharded parameters summed over TP,
  // replicated ones counted once (from tp_rank 0). Call after average_over_dp, so the value is
  // the same on every rank.
  double global_norm(const model::ParameterSet<float>& params) const;

 private:
  const dist::World& world_;
  std::unique_ptr<comm::AllReduce> dp_sum_;
};

// Scales the gradients by max_norm / norm when norm > max_norm (max_norm 0 = off); returns the factor.
double clip_gradients(model::ParameterSet<float>& params, double norm, double max_norm);

}  // namespace echo::train
