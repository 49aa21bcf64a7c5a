// The NCCL paths that only run where every rank drives its own GPU (docs/design.md §2.1, "No per-op
// waits"): the TP reducer's device half (comm::make_device_tp_reduce) against MPI_Allreduce on the
// same values, and Echo's device sites with their bytes over NCCL: the CPU's bits on clean
// inputs, and the deferred faults (a poisoned output, a non-finite rescale max) raised by
// raise_deferred_faults naming the site, once. Needs MPI and one GPU per rank of the node: skips
// otherwise, also under ECHO_REQUIRE_GPU=1 (the lent device machines have one GPU, so the device
// check cannot run it; a multi-GPU node can). Registered by hand in tests/comm/CMakeLists.txt.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/gpu_test.h"
#include "../support/test_data.h"
#include "../support/test_util.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/make_all_reduce.h"
#include "comm/nccl_group.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda_check.h"
#include "dist/collective_watchdog.h"
#include "dist/world.h"

namespace echo::comm {
namespace {

using echo::testing::expect_error;
using echo::testing::random_normal;

dist::Communicator world() { return dist::Communicator::borrow(MPI_COMM_WORLD); }

// Every rank of the node on its own GPU, or a skip on every rank alike.
#define REQUIRE_ONE_GPU_PER_RANK()                                                                     \
  do {                                                                                                 \
    const dist::NodePlace place = dist::node_place(world());                                          \
    int fits = cuda_device_count() >= place.local_size ? 1 : 0, all = 0;                               \
    MPI_Allreduce(&fits, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);                                   \
    if (all == 0) GTEST_SKIP() << "needs one GPU per rank of the node (NCCL refuses ranks sharing one)"; \
    CUDA_CHECK(cudaSetDevice(place.local_rank));                                                       \
  } while (0)

TEST(NcclPaths, DeviceTpReduceEqualsMpiAllreduce) {
  REQUIRE_ONE_GPU_PER_RANK();
  const auto comm = world();
  const backend::DeviceReduce reduce = make_device_tp_reduce(comm, config::Device::cuda);
  ASSERT_TRUE(static_cast<bool>(reduce));
  EXPECT_FALSE(make_device_tp_reduce(comm, config::Device::cuda, TransportKind::mpi)) << "mpi asks for the host path";
  const size_t n = 4097;
  const std::vector<float> f = random_normal(n, 5, static_cast<uint64_t>(comm.rank()), 0.0f, 3.0f);
  std::vector<double> d(f.begin(), f.end());
  for (double& v : d) v *= 1.0 + 1e-9 * comm.rank();
  for (backend::ReduceOp op : {backend::ReduceOp::max, backend::ReduceOp::sum}) {
    const MPI_Op mpi_op = op == backend::ReduceOp::max ? MPI_MAX : MPI_SUM;
    std::vector<double> want_d(n);
    std::vector<float> want_f(n);
    MPI_Allreduce(d.data(), want_d.data(), static_cast<int>(n), MPI_DOUBLE, mpi_op, MPI_COMM_WORLD);
    MPI_Allreduce(f.data(), want_f.data(), static_cast<int>(n), MPI_FLOAT, mpi_op, MPI_COMM_WORLD);
    Tensor td = Tensor::from_vector(d, {static_cast<int64_t>(n)}).to(Device::cuda);
    Tensor tf = Tensor::from_vector(f, {static_cast<int64_t>(n)}).to(Device::cuda);
    reduce(td.raw(), static_cast<int64_t>(n), DType::f64, op, nullptr);
    reduce(tf.raw(), static_cast<int64_t>(n), DType::f32, op, nullptr);
    const std::vector<double> got_d = td.to(Device::cpu).to_vector<double>();
    const std::vector<float> got_f = tf.to(Device::cpu).to_vector<float>();
    for (size_t i = 0; i < n; ++i) {
      if (op == backend::ReduceOp::max) {
        ASSERT_EQ(got_d[i], want_d[i]) << i;
        ASSERT_EQ(got_f[i], want_f[i]) << i;
      } else {  // another summation order: the last bits may differ
        ASSERT_NEAR(got_d[i], want_d[i], 1e-12 * (1.0 + std::fabs(want_d[i]))) << i;
        ASSERT_NEAR(got_f[i], want_f[i], 1e-5f * (1.0f + std::fabs(want_f[i]))) << i;
      }
    }
  }
}

TEST(NcclPaths, EchoOverNcclEqualsTheCpuAndDefersItsFaults) {
  REQUIRE_ONE_GPU_PER_RANK();
  const auto comm = world();
  EchoOptions o;
  o.quant = {QuantPolicy::asym_zero_aware, 4, 128};
  o.backward_rescale = true;
  o.transport.kind = TransportKind::automatic;  // mpi would keep the device path host-staged
  EchoAllReduce cpu(comm, o);                   // (the host one takes shm: the same bits)
  EchoAllReduce dev(comm, o);
  const size_t n = 128 * 41 + 5;
  for (Direction d : {Direction::forward, Direction::backward}) {
    cpu.begin_pass(d);
    dev.begin_pass(d);
    for (int site = 0; site < 3; ++site) {
      SCOPED_TRACE(fmt::format("{} site {}", to_string(d), site));
      std::vector<float> want = random_normal(n, 17 * site, static_cast<uint64_t>(comm.rank()), 0.01f, 0.5f);
      Tensor t = Tensor::from_vector(want, {static_cast<int64_t>(n)}).to(Device::cuda);
      cpu.all_reduce(std::span<float>(want), {site, d});
      dev.all_reduce(t, {site, d});
      const Tensor got = t.to(Device::cpu);
      EXPECT_EQ(std::memcmp(got.raw(), want.data(), n * sizeof(float)), 0);
    }
  }
  ASSERT_NE(dev.device_path(), nullptr);
  EXPECT_STREQ(dev.device_path()->transport(), "nccl");
  dev.raise_deferred_faults();  // nothing noted

  // A NaN on rank 1 at forward site 2: no error at the call, one at the step's end, then none.
  dev.begin_pass(Direction::forward);
  for (int site = 0; site < 4; ++site) {
    std::vector<float> x = random_normal(n, 99 + site, static_cast<uint64_t>(comm.rank()), 0.0f, 1.0f);
    if (site == 2 && comm.rank() == 1) x[300] = std::numeric_limits<float>::quiet_NaN();
    Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
    EXPECT_NO_THROW(dev.all_reduce(t, {site, Direction::forward}));
  }
  expect_error([&] { dev.raise_deferred_faults(); }, "forward site 2");
  EXPECT_NO_THROW(dev.raise_deferred_faults());

  // An infinity entering a backward site with rescaling: the non-finite max, named.
  dev.begin_pass(Direction::backward);
  std::vector<float> x = random_normal(n, 7, static_cast<uint64_t>(comm.rank()), 0.0f, 1.0f);
  if (comm.rank() == 0) x[10] = std::numeric_limits<float>::infinity();
  Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
  EXPECT_NO_THROW(dev.all_reduce(t, {1, Direction::backward}));
  expect_error([&] { dev.raise_deferred_faults(); }, "non-finite gradient entering the backward all-reduce at backward site 1");
}

// A peer that has not made the same NCCL call: the GPU waits in it with no timeout of NCCL's own,
// and nothing on the host waits yet. The collective watchdog's device probe (comm/nccl_watch.h)
// ends the rank after comm.peer_timeout_s naming the call; here its handler records the message,
// and then the peer joins, so the call completes with the right sum. The peer's own prompt call
// fires nothing.
TEST(NcclPaths, ACallAPeerHasNotMadeIsNamedByTheWatchdog) {
  REQUIRE_ONE_GPU_PER_RANK();
  const auto comm = world();
  NcclGroup group(comm);
  std::mutex mutex;
  std::vector<std::string> messages;
  dist::set_collective_timeout_handler([&](const std::string& m) {
    const std::lock_guard<std::mutex> lock(mutex);
    messages.push_back(m);
  });
  constexpr double kTimeoutS = 2;
  dist::set_collective_timeout(kTimeoutS, comm.rank());
  dist::set_collective_step(7);
  auto fired = [&] {
    const std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  };
  // Whole numbers: every summation order gives the same floats.
  const size_t n = 4096;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(comm.rank()) * 13) % 101);
  Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  if (comm.rank() == 0) {
    group.all_reduce(t.raw(), n, DType::f32, backend::ReduceOp::sum, stream);
    for (int i = 0; i < 600 && fired() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the peers join only now
  if (comm.rank() != 0) group.all_reduce(t.raw(), n, DType::f32, backend::ReduceOp::sum, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a look after the call completed
  dist::set_collective_timeout(0, comm.rank());
  dist::set_collective_step(0);
  dist::set_collective_timeout_handler({});

  std::vector<float> want(n);
  MPI_Allreduce(x.data(), want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(t.to(Device::cpu).to_vector<float>(), want);
  const std::lock_guard<std::mutex> lock(mutex);
  if (comm.rank() == 0) {
    ASSERT_EQ(messages.size(), 1u) << "one message, once";
    const std::string& m = messages[0];
    for (const std::string& part :
         {std::string("[rank 0] error: no progress for "),
          fmt::format("in NCCL all-reduce of {} f32 values over {} ranks on this rank's GPU, enqueued at step 7", n,
                      comm.size()),
          std::string("(comm.peer_timeout_s = 2)"), std::string("stopped, hung or gone")})
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  } else {
    EXPECT_TRUE(messages.empty()) << messages.front();
  }
}

}  // namespace
}  // namespace echo::comm
