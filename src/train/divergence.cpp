// Weight bound after each step.
#include "train/divergence.h"

#include <mpi.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::train {

double max_abs_weight(const model::ParameterSet<float>& params, const dist::Communicator& world) {
  auto& be = params.backend();
  Tensor acc = be.zeros({1}, DType::f64);
  for (size_t i = 0; i < params.size(); ++i) be.accumulate_max_abs(params[i].value, acc);
  // NaN cannot travel through MPI_MAX reliably: a non-finite weight is already +inf here.
  double mine = *be.to_host(acc).data<double>(), all = 0;
  const dist::CollectiveScope watched("the step's weight check (max |w| over ranks)", world);
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, world.get()));
  return all;
}

void check_weights(double max_abs, int64_t step, const std::string& kept) {
  // The gradients were finite (the step checks them before the update): the update did it.
  constexpr const char* kLikelyCause = "optim.lr too high, or optim.lr x optim.weight_decay >= 1?";
  ECHO_RUN_CHECK(std::isfinite(max_abs), "non-finite weights after the update of step {} ({}); {}", step,
                 kLikelyCause, kept);
  ECHO_RUN_CHECK(max_abs <= kMaxSaneWeight, "the weights diverged at step {}: max |w| = {:.3g} > {:.0e} ({}); {}", step,
                 max_abs, kMaxSaneWeight, kLikelyCause, kept);
}

DivergenceWarnings::DivergenceWarnings(int64_t vocab) : vocab_(vocab) {}

std::vector<std::string> DivergenceWarnings::after_step(int64_t step, double loss, double grad_norm) {
  std::vector<std::string> warnings;
  if (grad_norm == 0 && !zero_norm_said_) {
    zero_norm_said_ = true;
    warnings.push_back(fmt::format(
        "the gradient norm is exactly 0 at step {}: no weight moves, so nothing trains (weights that are all 0, or "
        "norms whose output is 0)",
        step));
  }
  // A uniform prediction scores ln(vocab); a model that has learned anything scores less. Twice
  // that is no loss spike of a healthy run.
  const double uniform = std::log(static_cast<double>(vocab_));
  if (loss > 2 * uniform && !loss_said_) {
    loss_said_ = true;
    warnings.push_back(fmt::format(
        "the loss {:.4f} at step {} is more than twice ln({}) = {:.4f}, the loss of a uniform prediction over the "
        "vocabulary: the model predicts worse than guessing (diverged: a smaller optim.lr, more "
        "schedule.warmup_steps or an optim.grad_clip help; or, at the first steps, a large model.init_std); the run "
        "goes on",
        loss, step, vocab_, uniform));
  }
  return warnings;
}

}  // namespace echo::train
