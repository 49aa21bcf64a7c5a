// ParameterSet::init: the weights are a function of (seed, parameter, global index) only, so the
// draw gives the same bits on any number of threads (a 0.6B model draws on up to 16), and each
// value is the documented N(0, std^2) draw: the Box-Muller formula written out here in long
// double from the Philox words, and the sample moments of a large matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>

#include "backend/backend.h"
#include "core/philox.h"
#include "model/parameters.h"
#include "model/tp_plan.h"
#include "model_test_util.h"

namespace echo::model {
namespace {

struct Weights {
  ModelShape shape;
  std::unique_ptr<backend::Backend> cpu = backend::make_backend(Device::cpu);
  Qwen3Plan plan;
  ParameterSet<float> params;
  explicit Weights(const config::ModelConfig& cfg)
      : shape(make_model_shape(cfg, 1, 0)), plan(make_qwen3_plan(shape)), params(plan, shape, *cpu) {}
};

config::ModelConfig wide_config() {
  config::ModelConfig cfg = testing::tiny_config(2);
  cfg.vocab_size = 1000;  // a 1000 x 64 embedding: 64,000 draws
  cfg.hidden = 64;
  cfg.ffn = 96;
  return cfg;
}

TEST(ParameterInit, AnyThreadCountGivesTheSameBits) {
  Weights one(wide_config()), three(wide_config()), seven(wide_config()), automatic(wide_config());
  one.params.init(42, 1);
  three.params.init(42, 3);
  seven.params.init(42, 7);
  automatic.params.init(42);
  const std::vector<float> ref = one.params.values().to_vector<float>();
  for (Weights* w : {&three, &seven, &automatic}) {
    const std::vector<float> got = w->params.values().to_vector<float>();
    ASSERT_EQ(got.size(), ref.size());
    size_t differ = 0;
    for (size_t e = 0; e < ref.size(); ++e) differ += std::memcmp(&got[e], &ref[e], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u);
  }
}

TEST(ParameterInit, EachValueIsTheBoxMullerDrawOfItsPhiloxWords) {
  Weights w(wide_config());
  w.params.init(7, 4);
  // Parameter 0 is the embedding (InitKind::normal, std = init_std; tp 1: global index = local).
  const std::vector<float> emb = w.params[0].value_vector();
  ASSERT_EQ(w.plan.embed, 0u);
  ASSERT_EQ(emb.size(), size_t{1000} * 64);
  double sum = 0, sum_sq = 0;
  for (size_t e = 0; e < emb.size(); ++e) {
    const PhiloxCounter r = philox4x32_10({{static_cast<uint32_t>(e), 0u, 0u, 0x1a17u}}, philox_key(7));
    const long double u1 = (static_cast<long double>(r.v[0]) + 0.5L) / 4294967296.0L;
    const long double u2 = (static_cast<long double>(r.v[1]) + 0.5L) / 4294967296.0L;
    const long double z = std::sqrt(-2.0L * std::log(u1)) * std::cos(2.0L * std::numbers::pi_v<long double> * u2);
    ASSERT_NEAR(emb[e], static_cast<double>(0.2L * z), 1e-6 * 0.2 * (1 + std::fabs(static_cast<double>(z))))
        << "element " << e;
    sum += emb[e];
    sum_sq += static_cast<double>(emb[e]) * emb[e];
  }
  const double n = static_cast<double>(emb.size());
  const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4 * 0.2 / std::sqrt(n));  // four standard errors
  EXPECT_NEAR(sd, 0.2, 0.2 * 0.02);
}

}  // namespace
}  // namespace echo::model
