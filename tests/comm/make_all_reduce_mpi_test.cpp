// The config -> all-reduce factory: each comm.allreduce value gives the implementation it names,
// with the config's coefficients, and the unavailable transports are refused with a message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "../support/test_data.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/make_all_reduce.h"
#include "core/error.h"

namespace echo::comm {

TEST(MakeAllReduce, BuildsWhatTheConfigNames) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  cfg.allreduce = config::AllReduceKind::exact;
  EXPECT_EQ(make_all_reduce(cfg, config::Device::cpu, tp, 4)->name(), "exact");
  cfg.allreduce = config::AllReduceKind::exact_fp32;
  EXPECT_EQ(make_all_reduce(cfg, config::Device::cpu, tp, 4)->name(), "exact_fp32");
  cfg.allreduce = config::AllReduceKind::echo;
  cfg.bits = 4;
  cfg.early_site_8bit = true;
  auto ar = make_all_reduce(cfg, config::Device::cpu, tp, 4);
  auto* echo = dynamic_cast<EchoAllReduce*>(ar.get());
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->bits_for({0, Direction::forward}), 8);
  EXPECT_EQ(echo->bits_for({7, Direction::forward}), 4);
}

// The TP reducer's device half (NCCL between distinct GPUs) is never made for the CPU backend nor
// for a one-rank group. (Where it is set, the cuda tests run the kernels' device-reducer paths
// through with_staged_device.)
TEST(MakeAllReduce, DeviceTpReduceNeverForTheCpuNorForOneRank) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  EXPECT_FALSE(make_device_tp_reduce(tp, config::Device::cpu));
  auto self = dist::Communicator::borrow(MPI_COMM_SELF);
  EXPECT_FALSE(make_device_tp_reduce(self, config::Device::cuda));
}

TEST(MakeAllReduce, EchoOptionsCarryTheCompensatorCoefficients) {
  config::CommConfig cfg;
  cfg.compensator.eta = 0.5;
  cfg.compensator.a = 0.2;
  cfg.compensator.beta1 = 0.6;
  cfg.compensator.beta2 = 0.1;
  cfg.backward_rescale = false;
  cfg.telemetry_interval = 10;
  const EchoOptions o = echo_options_from(cfg, 2);
  EXPECT_FLOAT_EQ(o.coeffs.eta, 0.5f);
  EXPECT_FLOAT_EQ(o.coeffs.a, 0.2f);
  EXPECT_FLOAT_EQ(o.coeffs.beta1, 0.6f);
  EXPECT_FLOAT_EQ(o.coeffs.beta2, 0.1f);
  EXPECT_FALSE(o.backward_rescale);
  EXPECT_TRUE(o.telemetry);
  EXPECT_EQ(o.quant.group_size, 128);
}

TEST(MakeAllReduce, EdgeAllReduceIsExactUnlessTheConfigSaysOtherwise) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  EXPECT_EQ(make_edge_all_reduce(cfg, tp), nullptr);
  cfg.embedding_exact = false;
  auto edge = make_edge_all_reduce(cfg, tp);
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(edge->name(), "echo");
  cfg.allreduce = config::AllReduceKind::exact;
  EXPECT_EQ(make_edge_all_reduce(cfg, tp), nullptr) << "an exact run has nothing to quantize";
}

TEST(MakeAllReduce, AutoChoosesTheSharedMemoryTransportOnOneNode) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  EXPECT_EQ(describe(*make_all_reduce(cfg, config::Device::cpu, tp, 2)), "echo over shm");
  cfg.transport = config::Transport::mpi;
  EXPECT_EQ(describe(*make_all_reduce(cfg, config::Device::cpu, tp, 2)), "echo over mpi");
  cfg.transport = config::Transport::shm;
  cfg.allreduce = config::AllReduceKind::exact;
  EXPECT_EQ(describe(*make_all_reduce(cfg, config::Device::cpu, tp, 2)), "exact over shm");
}

// cuda_ipc moves the device tensors of Echo's quantized sites; the host tensors of a CPU run take
// the host transport auto would pick.
TEST(MakeAllReduce, CudaIpcServesHostTensorsLikeAuto) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  cfg.transport = config::Transport::cuda_ipc;
  EXPECT_EQ(transport_options_from(cfg).kind, TransportKind::cuda_ipc);
  EXPECT_EQ(describe(*make_all_reduce(cfg, config::Device::cpu, tp, 2)), "echo over shm");
}

// comm.p2p_tiles and comm.p2p_slot_kib set the pipeline's workspace geometry; a small one (many
// rounds of 4 KiB slots) gives the MPI engine's bits.
TEST(MakeAllReduce, PipelineGeometryComesFromTheConfig) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  cfg.p2p_tiles = 3;
  cfg.p2p_slot_kib = 4;
  const TransportOptions t = transport_options_from(cfg);
  EXPECT_EQ(t.geometry.tiles, 3);
  EXPECT_EQ(t.geometry.slot_bytes, size_t{4096});
  cfg.transport = config::Transport::shm;
  auto shm = make_all_reduce(cfg, config::Device::cpu, tp, 2);
  cfg.transport = config::Transport::mpi;
  auto mpi = make_all_reduce(cfg, config::Device::cpu, tp, 2);
  const size_t n = 50'001;  // 4 KiB slots hold 7680 4-bit values: several rounds of 3 tiles
  std::vector<float> a = echo::testing::random_normal(n, 5, static_cast<uint64_t>(tp.rank()), 0.0f, 1.0f), b = a;
  shm->all_reduce(std::span<float>(a), {0, Direction::forward});
  mpi->all_reduce(std::span<float>(b), {0, Direction::forward});
  EXPECT_EQ(describe(*shm), "echo over shm");
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
}

// two_collective is Echo's arithmetic over the two-collective engine whatever the transport
// allows: the same bits as echo over the pipelined shm transport, and the same edge sites.
TEST(MakeAllReduce, TwoCollectiveIsEchoOverTheUnpipelinedEngine) {
  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  config::CommConfig cfg;
  cfg.allreduce = config::AllReduceKind::two_collective;
  EXPECT_FALSE(transport_options_from(cfg).pipelined);
  auto baseline = make_all_reduce(cfg, config::Device::cpu, tp, 2);
  EXPECT_EQ(describe(*baseline), "two_collective over mpi");
  cfg.embedding_exact = false;  // the edge sites quantized as under echo, over the same engine
  const auto edge = make_edge_all_reduce(cfg, tp);
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(describe(*edge), "two_collective over mpi");
  cfg.allreduce = config::AllReduceKind::echo;
  EXPECT_TRUE(transport_options_from(cfg).pipelined);
  auto echo = make_all_reduce(cfg, config::Device::cpu, tp, 2);
  EXPECT_EQ(describe(*echo), "echo over shm");
  const size_t n = 20'011;
  for (int site = 0; site < 3; ++site) {
    std::vector<float> a = echo::testing::random_normal(n, 11 + site, static_cast<uint64_t>(tp.rank()), 0.0f, 1.0f);
    std::vector<float> b = a;
    baseline->all_reduce(std::span<float>(a), {site, Direction::backward});
    echo->all_reduce(std::span<float>(b), {site, Direction::backward});
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << "site " << site;
  }
}

}  // namespace echo::comm
