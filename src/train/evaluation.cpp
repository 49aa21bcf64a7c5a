// evaluate_loss: the validation loop of docs/design.md §12.
#include "train/evaluation.h"

#include <cmath>

#include "core/error.h"

namespace echo::train {

namespace {
uint64_t global_batch(const EvalBatches& spec, int dp_size) {
  return static_cast<uint64_t>(spec.micro_batch) * static_cast<uint64_t>(spec.num_micro) *
         static_cast<uint64_t>(dp_size);
}
}  // namespace

EvalLoss evaluate_loss(model::Qwen3Model<float>& model, const data::DataLoader& loader, const dist::Communicator& dp,
                       const EvalBatches& spec, std::vector<int32_t>& tokens, std::vector<int32_t>& targets,
                       const std::function<bool()>& abandon) {
  ECHO_CHECK(spec.batches > 0 && spec.micro_batch > 0 && spec.num_micro > 0,
             "evaluation needs positive batches, micro_batch and num_micro (got {}, {}, {})", spec.batches,
             spec.micro_batch, spec.num_micro);
  // NOTE: the set is `batches` global batches, split over DP ranks and micro-batches exactly like
  // a training step, so the loss is the same number at every tp/dp layout (it once read
  // eval_batches micro-batches per DP rank: a set that grew with dp).
  const int64_t seq = loader.options().seq_len;
  const int total = spec.batches * spec.num_micro;
  // Summed on the model's device, read once at the end.
  Tensor acc = model.loss_accumulator();
  for (int b = 0; b < spec.batches; ++b) {
    for (int micro = 0; micro < spec.num_micro; ++micro) {
      loader.micro_batch(static_cast<uint64_t>(b) * global_batch(spec, dp.size()), micro, spec.micro_batch,
                         spec.num_micro, tokens, targets);
      model.forward({tokens.data(), targets.data(), spec.micro_batch, seq}, false, acc, total);
    }
    if (abandon && b + 1 < spec.batches && abandon()) {
      EvalLoss r;
      r.loss = NAN;
      r.abandoned_at = b + 1;
      return r;
    }
  }
  const double loss = model.read_loss(acc);
  EvalLoss r;
  r.loss = dp.sum_in_rank_order(loss) / dp.size();
  r.tokens = static_cast<int64_t>(total) * spec.micro_batch * seq * dp.size();
  return r;
}

std::string EvalCoverage::advice(const EvalBatches& spec, int dp_size, const std::string& batches_setting) const {
  const uint64_t global = global_batch(spec, dp_size), fit = available / global;
  if (fit == 0)
    return fmt::format("the data holds fewer sequences than one global batch of {}: use a smaller global batch, or "
                       "more data",
                       global);
  return fmt::format("set {} to {} or fewer to read each once", batches_setting, fit);
}

EvalCoverage eval_coverage(const data::DataLoader& loader, const EvalBatches& spec, int dp_size) {
  return {static_cast<uint64_t>(spec.batches) * global_batch(spec, dp_size), loader.samples_per_epoch()};
}

}  // namespace echo::train
