// The NCCL paths that only run where every rank drives its own GPU (docs/design.md §2.1, "No per-op
// waits"): the TP reducer's device half (comm::make_device_tp_reduce) against MPI_Allreduce on the
// same values, and Echo's device sites with their bytes over NCCL: the CPU's bits on clean
// inputs, and the deferred faults (a poisoned output, a non-finite rescale max) raised by
// raise_deferred_faults naming the site, once. Needs MPI and one GPU per rank of the node: skips
// otherwise, also under ECHO_REQUIRE_GPU=1 (the lent device machines have one GPU, so the device
// check cannot run it; a multi-GPU node can). Registered by hand in tests/comm/CMakeLists.txt.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
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

// The collective watchdog armed for a test, its messages recorded instead of ending the process;
// disarmed however the test ends.
class ArmedWatchdog {
 public:
  ArmedWatchdog(double timeout_s, int rank, int64_t step) {
    dist::set_collective_timeout_handler([this](const std::string& m) {
      const std::lock_guard<std::mutex> lock(mutex_);
      messages_.push_back(m);
    });
    dist::set_collective_timeout(timeout_s, rank);
    dist::set_collective_step(step);
  }
  ~ArmedWatchdog() {
    dist::set_collective_timeout(0, 0);
    dist::set_collective_step(0);
    dist::set_collective_timeout_handler({});
  }
  std::vector<std::string> messages() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  // Waits up to `limit_s` for there to be `count` messages; true if there are.
  bool await_messages(size_t count, double limit_s) {
    for (int i = 0; i < static_cast<int>(limit_s * 10); ++i) {
      if (messages().size() >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return messages().size() >= count;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> messages_;
};

// The seconds in "no progress for T s".
double seconds_waited(const std::string& message) {
  const std::string key = "no progress for ";
  const size_t at = message.find(key);
  return at == std::string::npos ? -1.0 : std::atof(message.c_str() + at + key.size());
}

// A peer that has not made the same NCCL call: the GPU waits in it with no timeout of NCCL's own,
// and nothing on the host waits yet. The device watch (comm/nccl_watch.h) names the call after
// comm.peer_timeout_s, timed from when this GPU reached it; here the handler records the message,
// and then the peer joins, so the call still completes with the right result. Before that, calls
// queued behind this GPU's own long work (a host function sleeping longer than the limit) fire
// nothing: that wait is no peer's.
TEST(NcclPaths, ACallAPeerHasNotMadeIsNamedByTheWatchdog) {
  REQUIRE_ONE_GPU_PER_RANK();
  const auto comm = world();
  NcclGroup group(comm);
  constexpr double kTimeoutS = 3;
  ArmedWatchdog watchdog(kTimeoutS, comm.rank(), 7);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  // Whole numbers: every summation order gives the same floats.
  const size_t n = 4096;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(comm.rank()) * 13) % 101);
  Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
  std::vector<float> sum(n);
  MPI_Allreduce(x.data(), sum.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  std::vector<float> twice = sum;
  for (float& v : twice) v *= static_cast<float>(comm.size());
  // The all-gather: rank r's 1000 + 10 r bytes, each r + 1.
  ByteExchange gather;
  for (int r = 0; r < comm.size(); ++r) {
    gather.counts.push_back(1000 + 10 * r);
    gather.displs.push_back(r == 0 ? 0 : gather.displs.back() + gather.counts[r - 1]);
  }
  const size_t gathered = static_cast<size_t>(gather.displs.back() + gather.counts.back());
  Tensor own = Tensor::from_vector(std::vector<uint8_t>(static_cast<size_t>(gather.counts[comm.rank()]),
                                                        static_cast<uint8_t>(comm.rank() + 1)),
                                   {gather.counts[comm.rank()]})
                   .to(Device::cuda);
  Tensor all =
      Tensor::from_vector(std::vector<uint8_t>(gathered, 0), {static_cast<int64_t>(gathered)}).to(Device::cuda);
  std::vector<uint8_t> want_all(gathered);
  for (int r = 0; r < comm.size(); ++r)
    std::fill_n(want_all.begin() + gather.displs[r], gather.counts[r], static_cast<uint8_t>(r + 1));

  // 1. Longer than the limit in this GPU's own work before the calls, which every rank then makes.
  MPI_Barrier(MPI_COMM_WORLD);
  CUDA_CHECK(cudaLaunchHostFunc(
      stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(4500)); }, nullptr));
  group.all_reduce(t.raw(), n, DType::f32, backend::ReduceOp::sum, stream);
  group.all_gather_bytes(static_cast<const uint8_t*>(own.raw()), static_cast<uint8_t*>(all.raw()), gather, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a look after the calls completed
  EXPECT_EQ(t.to(Device::cpu).to_vector<float>(), sum);
  EXPECT_EQ(all.to(Device::cpu).to_vector<uint8_t>(), want_all);
  EXPECT_TRUE(watchdog.messages().empty()) << watchdog.messages().front();

  // 2. Rank 0 alone in a call until its message, first an all-reduce, then an all-gather.
  const std::vector<std::string> names = {
      fmt::format("in NCCL all-reduce of {} f32 values over {} ranks on this rank's GPU, enqueued at step 7", n,
                  comm.size()),
      fmt::format("in NCCL all-gather of {} bytes over {} ranks on this rank's GPU, enqueued at step 7", gathered,
                  comm.size())};
  std::vector<double> waited_s;
  for (size_t call = 0; call < names.size(); ++call) {
    auto enqueue = [&] {
      if (call == 0)
        group.all_reduce(t.raw(), n, DType::f32, backend::ReduceOp::sum, stream);
      else
        group.all_gather_bytes(static_cast<const uint8_t*>(own.raw()), static_cast<uint8_t*>(all.raw()), gather,
                               stream);
    };
    if (comm.rank() == 0) {
      const auto start = std::chrono::steady_clock::now();
      enqueue();
      EXPECT_TRUE(watchdog.await_messages(call + 1, 60)) << "no message after 60 s for " << names[call];
      waited_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the peers join only now
    if (comm.rank() != 0) enqueue();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (comm.rank() == 0) {
      const std::vector<std::string> m = watchdog.messages();
      ASSERT_EQ(m.size(), call + 1) << "one message per call, once";
      EXPECT_NE(m[call].find(names[call]), std::string::npos) << "missing '" << names[call] << "' in: " << m[call];
      for (const char* part :
           {"[rank 0] error: no progress for ", "(comm.peer_timeout_s = 3;", "stopped, hung or gone"})
        EXPECT_NE(m[call].find(part), std::string::npos) << "missing '" << part << "' in: " << m[call];
      EXPECT_GE(seconds_waited(m[call]), kTimeoutS) << m[call];
      EXPECT_GE(waited_s[call], kTimeoutS) << "fired before the limit";
      EXPECT_LT(seconds_waited(m[call]), kTimeoutS + 5) << m[call];
    }
  }
  EXPECT_EQ(t.to(Device::cpu).to_vector<float>(), twice);
  EXPECT_EQ(all.to(Device::cpu).to_vector<uint8_t>(), want_all);
  if (comm.rank() != 0) {
    EXPECT_TRUE(watchdog.messages().empty()) << watchdog.messages().front();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace echo::comm
