// AdamW against a double-precision reference, the LR schedule's shape, and clipping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "train/adamw.h"
#include "train/gradients.h"
#include "train/lr_schedule.h"

namespace echo::train {
namespace {

model::ModelShape tiny_shape() {
  config::ModelConfig c;
  c.vocab_size = 16;
  c.vocab_pad_multiple = 8;
  c.hidden = 8;
  c.ffn = 12;
  c.layers = 1;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 4;
  return model::make_model_shape(c, 1, 0);
}

TEST(AdamW, MatchesADoublePrecisionReferenceWithDecoupledDecayOnMatricesOnly) {
  const auto shape = tiny_shape();
  const auto plan = model::make_qwen3_plan(shape);
  backend::CpuBackend backend;
  model::ParameterSet<float> params(plan, shape, backend);
  params.init(3);
  config::OptimConfig cfg;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-5;
  cfg.weight_decay = 0.1;
  AdamW opt(params);
  std::mt19937 gen(5);
  std::normal_distribution<float> g(0.0f, 0.3f);
  // Reference state in double.
  std::vector<std::vector<double>> w, m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    w.emplace_back(params[i].host_value().begin(), params[i].host_value().end());
    m.emplace_back(params[i].host_value().size(), 0.0);
    v.emplace_back(params[i].host_value().size(), 0.0);
  }
  for (int step = 1; step <= 3; ++step) {
    const double lr = 1e-2 * step;
    for (size_t i = 0; i < params.size(); ++i)
      for (auto& x : params[i].host_grad()) x = g(gen);
    for (size_t i = 0; i < params.size(); ++i) {
      const double decay = params[i].spec->weight_decay ? cfg.weight_decay : 0.0;
      for (size_t e = 0; e < w[i].size(); ++e) {
        const double gr = params[i].host_grad()[e];
        m[i][e] = cfg.beta1 * m[i][e] + (1 - cfg.beta1) * gr;
        v[i][e] = cfg.beta2 * v[i][e] + (1 - cfg.beta2) * gr * gr;
        const double mh = m[i][e] / (1 - std::pow(cfg.beta1, step)), vh = v[i][e] / (1 - std::pow(cfg.beta2, step));
        w[i][e] = w[i][e] * (1 - lr * decay) - lr * mh / (std::sqrt(vh) + cfg.eps);
      }
    }
    opt.step(params, lr, cfg);
    EXPECT_EQ(opt.step_count(), step);
    for (size_t i = 0; i < params.size(); ++i)
      for (size_t e = 0; e < w[i].size(); ++e)
        ASSERT_NEAR(params[i].host_value()[e], w[i][e], 2e-6 * (1 + std::fabs(w[i][e]))) << params[i].spec->name;
  }
  // Norms carry no decay: a zero gradient leaves a norm weight exactly where it is.
  for (size_t i = 0; i < params.size(); ++i) std::ranges::fill(params[i].host_grad(), 0.0f);
  AdamW fresh(params);
  const float before = params[plan.final_norm].host_value()[0];
  fresh.step(params, 1e-2, cfg);
  EXPECT_EQ(params[plan.final_norm].host_value()[0], before);
  EXPECT_FALSE(plan.params[plan.final_norm].weight_decay);
  EXPECT_FALSE(plan.params[plan.embed].weight_decay);
  EXPECT_TRUE(plan.params[plan.layers[0].q].weight_decay);
}

TEST(LrSchedule, WarmupThenCosineToTheMinimum) {
  config::OptimConfig o;
  o.lr = 3e-4;
  o.min_lr = 3e-5;
  config::ScheduleConfig s;
  s.warmup_steps = 10;
  s.decay = config::LrDecay::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 0, 100), 3e-5);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 4, 100), 1.5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 9, 100), 3e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 10, 100), 3e-4);
  EXPECT_NEAR(learning_rate(o, s, 99, 100), 3e-5, 1e-15);
  const double mid = learning_rate(o, s, 54, 100);  // 44 of the 89 decay steps done
  const double expect_mid = 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + std::cos(std::numbers::pi * 44.0 / 89.0));
  EXPECT_NEAR(mid, expect_mid, 1e-15);
  for (int64_t t = 10; t < 99; ++t) EXPECT_GE(learning_rate(o, s, t, 100), learning_rate(o, s, t + 1, 100));
  s.decay = config::LrDecay::linear;
  EXPECT_NEAR(learning_rate(o, s, 54, 100), 3e-5 + (3e-4 - 3e-5) * (1 - 44.0 / 89.0), 1e-15);
  s.decay = config::LrDecay::constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 80, 100), 3e-4);
}

TEST(Clipping, ScalesToTheMaximumNormOnlyAboveIt) {
  const auto shape = tiny_shape();
  const auto plan = model::make_qwen3_plan(shape);
  backend::CpuBackend backend;
  model::ParameterSet<float> params(plan, shape, backend);
  for (size_t i = 0; i < params.size(); ++i) std::ranges::fill(params[i].host_grad(), 0.5f);
  EXPECT_EQ(clip_gradients(params, 0.8, 1.0), 1.0);
  EXPECT_EQ(params[0].host_grad()[0], 0.5f);
  const double f = clip_gradients(params, 4.0, 1.0);
  EXPECT_NEAR(f, 0.25, 1e-6);
  EXPECT_NEAR(params[0].host_grad()[0], 0.125f, 1e-7);
  EXPECT_EQ(clip_gradients(params, 4.0, 0.0), 1.0) << "grad_clip 0 turns clipping off";
}

}  // namespace
}  // namespace echo::train
