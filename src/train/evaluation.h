// The validation loss shared by the trainer's periodic eval and echo_eval (docs/design.md §12):
// one function, so a checkpoint evaluated offline gives the number the trainer logged.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "dist/communicator.h"
#include "model/qwen3_model.h"

namespace echo::train {

// Which windows of the loader are evaluated: `batches` global batches, each split over the DP
// ranks and into `num_micro` micro-batches of `micro_batch` sequences exactly like a training
// step (batch b plays the role of step b), so the set does not depend on the tp × dp layout.
struct EvalBatches {
  int batches = 1;
  int micro_batch = 1;
  int num_micro = 1;
};

struct EvalLoss {
  double loss = 0;       // mean cross-entropy per target token (the same value on every rank)
  int64_t tokens = 0;    // target tokens over all DP ranks
  int abandoned_at = 0;  // > 0: `abandon` said so after this many global batches; loss is NaN
};

// Forward passes only (no activations kept). Collective over `dp` and over the model's TP group.
// `tokens` and `targets` are scratch buffers (the trainer reuses its own).
// NOTE: the summation order (each micro-batch's mean / (batches · num_micro), then the rank-order
// sum over DP / dp) is part of the contract: the trainer's val_loss and echo_eval agree bit for bit.
// `abandon`, when given, is asked after each global batch but the last, on every rank alike (it
// may be collective: the trainer's stop check), and true ends the evaluation there.
EvalLoss evaluate_loss(model::Qwen3Model<float>& model, const data::DataLoader& loader, const dist::Communicator& dp,
                       const EvalBatches& spec, std::vector<int32_t>& tokens, std::vector<int32_t>& targets,
                       const std::function<bool()>& abandon = {});

// The sequences an evaluation of `spec` reads over `dp_size` ranks (batches × global batch), and
// how many distinct ones the loader's data holds: past that, batches wrap into the data's next
// epoch and sequences are counted twice. echo_eval refuses such a request, the trainer warns.
struct EvalCoverage {
  uint64_t needed = 0;
  uint64_t available = 0;
  bool repeats() const { return needed > available; }
  // What to do about repeats: "pass <batches_setting> N or fewer", or, when not even one global
  // batch fits, that the data is smaller than one.
  std::string advice(const EvalBatches& spec, int dp_size, const std::string& batches_setting) const;
};
EvalCoverage eval_coverage(const data::DataLoader& loader, const EvalBatches& spec, int dp_size);

}  // namespace echo::train
