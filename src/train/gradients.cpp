// DP averaging, global norm, clipping.
#include "train/gradients.h"

#include <cmath>

namespace echo::train {

GradientSync::GradientSync(const dist::World& world) : world_(world), dp_sum_(world.dp, comm::ExactPrecision::fp32) {}

void GradientSync::average_over_dp(model::ParameterSet<float>& params) {
  if (world_.layout.dp == 1) return;
  size_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) total += params[i].grad.size();
  flat_.resize(total);
  size_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::copy(params[i].grad.begin(), params[i].grad.end(), flat_.begin() + at);
    at += params[i].grad.size();
  }
  dp_sum_.all_reduce(flat_, {0, comm::Direction::backward});
  const float inv = 1.0f / static_cast<float>(world_.layout.dp);
  at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    for (float& g : params[i].grad) g = flat_[at++] * inv;
  }
}

double GradientSync::global_norm(const model::ParameterSet<float>& params) const {
  double local = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto shard = params[i].spec->shard;
    const bool replicated = shard == model::ShardKind::replicated || shard == model::ShardKind::replicated_grad_sum;
    if (replicated && world_.layout.tp_rank != 0) continue;
    for (float g : params[i].grad) local += static_cast<double>(g) * g;
  }
  // NOTE: every rank must get the same bits, or the clip factor (and then the replicated
  // weights) would differ across the group.
  return std::sqrt(world_.tp.sum_in_rank_order(local));
}

double clip_gradients(model::ParameterSet<float>& params, double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < params.size(); ++i)
    for (float& g : params[i].grad) g *= f;
  return factor;
}

}  // namespace echo::train
