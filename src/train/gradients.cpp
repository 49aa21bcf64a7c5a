// DP averaging, global norm, clipping.
#include "train/gradients.h"

#include <cmath>

#include "comm/make_all_reduce.h"

namespace echo::train {

GradientSync::GradientSync(const dist::World& world, config::Device device)
    : world_(world), dp_sum_(comm::make_exact_all_reduce(world.dp, comm::ExactPrecision::fp32, device)) {}

void GradientSync::average_over_dp(model::ParameterSet<float>& params) {
  if (world_.layout.dp == 1) return;
  // The gradients are one flat buffer in parameter order: one exact all-reduce, then the mean.
  dp_sum_->all_reduce(params.grads(), {0, comm::Direction::backward});
  // NOTE: 1/dp rounded to float first, as the update always used: the cast back is exact.
  params.backend().scale(params.grads(), static_cast<double>(1.0f / static_cast<float>(world_.layout.dp)));
}

double GradientSync::global_norm(const model::ParameterSet<float>& params) const {
  auto& be = params.backend();
  Tensor acc = be.zeros({1}, DType::f64);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto shard = params[i].spec->shard;
    const bool replicated = shard == model::ShardKind::replicated || shard == model::ShardKind::replicated_grad_sum;
    if (replicated && world_.layout.tp_rank != 0) continue;
    be.accumulate_sum_squares(params[i].grad, acc);
  }
  const double local = *be.to_host(acc).data<double>();
  // NOTE: every rank must get the same bits, or the clip factor (and then the replicated
  // weights) would differ across the group.
  return std::sqrt(world_.tp.sum_in_rank_order(local));
}

double clip_gradients(model::ParameterSet<float>& params, double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  params.backend().scale(params.grads(), factor);
  return factor;
}

}  // namespace echo::train
