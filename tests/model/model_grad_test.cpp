// The whole model's gradients against central finite differences, in double, tp = 1.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model_test_util.h"

namespace echo::model {
namespace {

using testing::random_batch;
using testing::tiny_config;

void check_model_gradients(const config::ModelConfig& cfg, int64_t batch, int64_t seq, uint64_t seed) {
  ExactTpOps<double> tp;
  const ModelShape shape = make_model_shape(cfg, 1, 0);
  Qwen3Model<double> model(shape, tp);
  model.init_weights(seed);
  const auto b = random_batch(batch, seq, shape.vocab, seed + 1);
  model.params().zero_grads();
  model.forward_backward(b.view());

  std::mt19937_64 pick(seed + 2);
  const double h = 1e-6;
  int checked = 0;
  for (size_t i = 0; i < model.params().size(); ++i) {
    auto& p = model.params()[i];
    // Every entry of small tensors, a random sample of the large ones.
    const size_t n = p.host_value().size(), samples = std::min<size_t>(n, 12);
    for (size_t s = 0; s < samples; ++s) {
      const size_t e = samples == n ? s : pick() % n;
      const double saved = p.host_value()[e];
      p.host_value()[e] = saved + h;
      const double up = model.forward(b.view(), false);
      p.host_value()[e] = saved - h;
      const double down = model.forward(b.view(), false);
      p.host_value()[e] = saved;
      const double fd = (up - down) / (2 * h);
      const double an = p.host_grad()[e];
      EXPECT_NEAR(an, fd, 1e-6 + 1e-5 * std::fabs(fd)) << p.spec->name << "[" << e << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Qwen3Gradients, MatchFiniteDifferencesOnATwoLayerModel) {
  for (uint64_t seed : {1u, 2u}) check_model_gradients(tiny_config(2), 2, 5, seed);
}

TEST(Qwen3Gradients, TiedEmbeddings) {
  auto cfg = tiny_config(2);
  cfg.tie_embeddings = true;
  check_model_gradients(cfg, 1, 6, 7);
}

TEST(Qwen3Gradients, GqaWithOneKvHeadAndWithAsManyAsQueryHeads) {
  check_model_gradients(tiny_config(2, 4, 1), 2, 4, 11);
  check_model_gradients(tiny_config(2, 4, 4), 2, 4, 12);
}

TEST(Qwen3Gradients, SequenceOfOneToken) { check_model_gradients(tiny_config(2), 3, 1, 13); }

TEST(Qwen3Model, LongSequencesHaveNoRopeLimit) {
  // RoPE angles are computed per position (no cache): a sequence of 300 tokens works and its
  // loss is finite; the causal model's first positions do not depend on the later ones.
  ExactTpOps<double> tp;
  const ModelShape shape = make_model_shape(tiny_config(1), 1, 0);
  Qwen3Model<double> model(shape, tp);
  model.init_weights(3);
  auto b = random_batch(1, 300, shape.vocab, 4);
  const double loss = model.forward(b.view(), false);
  EXPECT_TRUE(std::isfinite(loss));
  const auto h1 = model.final_hidden();
  b.tokens[299] = (b.tokens[299] + 1) % shape.vocab;
  model.forward(b.view(), false);
  const auto h2 = model.final_hidden();
  for (int64_t i = 0; i < 299 * shape.hidden; ++i) ASSERT_EQ(h1[i], h2[i]) << "position " << i / shape.hidden;
  double diff = 0;
  for (int64_t i = 299 * shape.hidden; i < 300 * shape.hidden; ++i) diff += std::fabs(h1[i] - h2[i]);
  EXPECT_GT(diff, 0.0);
}

TEST(Qwen3Model, LossAccumulatorAddsEachLossOverTheDivisor) {
  // What the trainer and the evaluation do: the micro-batches' losses added on the device, read
  // once. It must be the host sum of forward()'s losses / divisor, bit for bit, and leave the same
  // gradients as forward_backward().
  ExactTpOps<float> tp;
  const ModelShape shape = make_model_shape(tiny_config(2), 1, 0);
  Qwen3Model<float> a(shape, tp), b(shape, tp);
  a.init_weights(5);
  b.init_weights(5);
  const auto b1 = random_batch(2, 5, shape.vocab, 21), b2 = random_batch(2, 5, shape.vocab, 22);
  double expected = 0;
  for (const auto* batch : {&b1, &b2}) expected += a.forward_backward(batch->view(), 0.5f) / 2;
  Tensor acc = b.loss_accumulator();
  for (const auto* batch : {&b1, &b2}) b.forward_backward(batch->view(), 0.5f, acc, 2);
  EXPECT_EQ(*acc.data<double>(), expected);
  EXPECT_GT(expected, 1.0) << "a random model's loss is near log(vocab)";
  const auto ga = a.params().grads().to_vector<float>(), gb = b.params().grads().to_vector<float>();
  ASSERT_EQ(ga.size(), gb.size());
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_EQ(ga[i], gb[i]) << i;
  // An evaluation forward adds too, and keeps nothing for backward.
  Tensor eval = b.loss_accumulator();
  b.forward(b1.view(), false, eval, 4);
  EXPECT_EQ(*eval.data<double>(), a.forward(b1.view(), false) / 4);
  EXPECT_THROW(b.backward(), Error);
}

TEST(Qwen3Model, RejectsTokensOutsideTheVocabulary) {
  ExactTpOps<double> tp;
  const ModelShape shape = make_model_shape(tiny_config(1), 1, 0);
  Qwen3Model<double> model(shape, tp);
  auto b = random_batch(1, 4, shape.vocab, 4);
  b.tokens[2] = static_cast<int32_t>(shape.vocab);
  try {
    model.forward(b.view());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 32 at position 2 is outside the vocabulary of 32 ids"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelShape, TpMustDivideHeadsKvHeadsFfnAndVocab) {
  auto cfg = tiny_config(2, 4, 2);
  EXPECT_NO_THROW(make_model_shape(cfg, 2, 1));
  const struct {
    int tp;
    const char* message;
  } cases[] = {{4, "'parallel.tp' = 4 does not divide 'model.kv_heads' = 2"},
               {3, "'parallel.tp' = 3 does not divide 'model.heads' = 4"}};
  for (const auto& c : cases) {
    try {
      make_model_shape(cfg, c.tp, 0);
      ADD_FAILURE() << "tp " << c.tp;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  cfg.ffn = 25;
  try {
    make_model_shape(cfg, 2, 0);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.ffn' = 25"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace echo::model
