// INT8 S3R-EC linear layers inside the Qwen3 model under TP (2 and 4 ranks): thresholds are
// keyed by global indices, so tp = 1, 2, 4 draw the same codes and give the same loss and
// gradients; the INT8 forward stays close to fp32.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "comm/exact_all_reduce.h"
#include "dist/world.h"
#include "model_test_util.h"
#include "tp_test_util.h"

namespace echo::model {
namespace {

using testing::gather_grad;
using testing::random_batch;
using testing::rel_diff;

config::ModelConfig int8_config() {
  config::ModelConfig c = testing::tiny_config(2, 8, 4);
  c.hidden = 32;
  c.ffn = 48;
  c.vocab_size = 64;
  c.vocab_pad_multiple = 16;
  c.init_std = 0.1;
  return c;
}

quant::Int8LinearConfig s3r(config::EcMode ec) {
  quant::Int8LinearConfig q;
  q.mode = config::LinearMode::int8;
  q.rounding = config::BackwardRounding::s3r;
  q.thresholds = config::ThresholdMode::per_token;
  q.ec = ec;
  q.seed = 99;
  return q;
}

TEST(Int8Model, TpLayoutsDrawTheSameThresholdsAndAgree) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (config::EcMode ec : {config::EcMode::none, config::EcMode::two_way}) {
    for (int tp : {2, 4}) {
      if (world % tp) continue;
      dist::World w = dist::World::create(tp);
      const auto cfg = int8_config();
      const auto batch = random_batch(2, 8, cfg.vocab_size, 31);

      ExactTpOps<float> solo;
      Qwen3Model<float> ref(make_model_shape(cfg, 1, 0), solo);
      ref.init_weights(4);
      ref.set_int8_linear(s3r(ec));
      ref.set_position(7, 0);
      const double ref_loss = ref.forward_backward(batch.view());

      comm::ExactAllReduce exact(w.tp, comm::ExactPrecision::fp32);
      CommTpOps ops(w.tp, exact);
      Qwen3Model<float> m(make_model_shape(cfg, tp, w.layout.tp_rank), ops);
      m.init_weights(4);
      m.set_int8_linear(s3r(ec));
      m.set_position(7, 0);
      const double loss = m.forward_backward(batch.view());
      EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss)) << "tp=" << tp;
      for (size_t i = 0; i < m.params().size(); ++i)
        EXPECT_LT(rel_diff(gather_grad(m.params()[i], w.tp), ref.params()[i].grad_vector()), 1e-4)
            << m.params()[i].spec->name << " tp=" << tp << " ec=" << static_cast<int>(ec);
    }
  }
}

TEST(Int8Model, ForwardStaysCloseToFp32AndThresholdsFollowTheStep) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  const auto cfg = int8_config();
  const auto batch = random_batch(2, 8, cfg.vocab_size, 5);
  comm::ExactAllReduce exact(tp, comm::ExactPrecision::fp32);
  CommTpOps ops(tp, exact);
  const ModelShape shape = make_model_shape(cfg, tp.size(), tp.rank());
  Qwen3Model<float> fp(shape, ops), q(shape, ops);
  fp.init_weights(6);
  q.init_weights(6);
  q.set_int8_linear(s3r(config::EcMode::two_way));
  const double lf = fp.forward(batch.view(), false), lq = q.forward(batch.view(), true);
  EXPECT_NEAR(lq, lf, 2e-2 * lf);
  EXPECT_NE(lq, lf);
  // The backward draws new thresholds at another step: different gradients, same loss.
  q.backward();
  const auto g1 = q.params()[q.plan().layers[0].q].grad_vector();
  q.params().zero_grads();
  q.set_position(1, 0);
  q.forward(batch.view(), true);
  q.backward();
  EXPECT_NE(q.params()[q.plan().layers[0].q].grad_vector(), g1);
}

TEST(Int8Model, OnlyTheNamedProjectionsRunInInt8) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  const auto cfg = int8_config();
  const auto batch = random_batch(2, 8, cfg.vocab_size, 9);
  comm::ExactAllReduce exact(tp, comm::ExactPrecision::fp32);
  CommTpOps ops(tp, exact);
  const ModelShape shape = make_model_shape(cfg, tp.size(), tp.rank());
  auto loss_with = [&](const std::vector<std::string>& names, bool int8) {
    Qwen3Model<float> m(shape, ops);
    m.init_weights(2);
    if (int8) m.set_int8_linear(s3r(config::EcMode::none), names);
    return m.forward(batch.view(), false);
  };
  const double fp = loss_with({}, false), all = loss_with({}, true), listed = loss_with(
      {"q", "k", "v", "o", "gate", "up", "down"}, true), down = loss_with({"down"}, true);
  EXPECT_EQ(all, listed) << "an empty list means all seven";
  EXPECT_NE(down, fp);
  EXPECT_NE(down, all);
  EXPECT_LT(std::fabs(down - fp), std::fabs(all - fp) + 1e-3) << "one int8 projection perturbs less than seven";
  Qwen3Model<float> m(shape, ops);
  EXPECT_THROW(m.set_int8_linear(s3r(config::EcMode::none), {"lm_head"}), Error);
}

}  // namespace
}  // namespace echo::model
