// Divergence detection after each optimizer step, so that a diverged step is never saved as a
// checkpoint (and keep-last pruning never trades the healthy checkpoints for bad ones).
//
// A run can go bad while the loss stays finite: with optim.lr = 100 and weight_decay = 0.1 the
// decoupled decay multiplies every weight by 1 - lr * wd = -9 per step, RMSNorm hides the scale
// from the loss, and the weights reach 4e15 before anything overflows. So besides non-finite
// values the check bounds the weights: trained LLM weights stay within a few hundred (RMSNorm
// gains are the largest), so one beyond kMaxSaneWeight means the optimizer ran away.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/parameters.h"

namespace echo::train {

inline constexpr double kMaxSaneWeight = 1.0e6;

// max |w| over every parameter of the whole model (all TP shards), +inf when any is non-finite.
// Collective over `world` (one MPI_Allreduce): every rank gets the same value.
double max_abs_weight(const model::ParameterSet<float>& params, const dist::Communicator& world);

// Throws echo::Error when max_abs is non-finite or above kMaxSaneWeight, naming the step (1-based)
// and `kept` (what the message says about the last good checkpoint).
void check_weights(double max_abs, int64_t step, const std::string& kept);

// What a run that goes on is told when it does not learn or has diverged below the weight bound
// (optim.lr = 10 drove the loss to 5244, 880x a uniform prediction's, and ended "done" with exit
// 0; a model.norm_eps of 1e30 kept the gradient norm at 0): each warning once per run.
class DivergenceWarnings {
 public:
  // vocab: the logits' width (the padded vocabulary), whose uniform prediction's loss is ln(vocab).
  explicit DivergenceWarnings(int64_t vocab);
  // The warnings after step `step` (1-based) with its loss and global gradient norm (before
  // clipping): none, or those not given before.
  std::vector<std::string> after_step(int64_t step, double loss, double grad_norm);

 private:
  int64_t vocab_;
  bool zero_norm_said_ = false, loss_said_ = false;
};

}  // namespace echo::train
