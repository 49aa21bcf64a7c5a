// The device Echo path (src/comm/echo/device_qar.h) against the CPU EchoAllReduce over a real
// multi-rank MPI group: for f32 device tensors the output, every site, and the compensator state
// after each pass must be bitwise the CPU's, and identical on every rank; for bf16 device tensors
// the output is the CPU's f32 result (on the bf16 values widened to f32) rounded to bf16 and the
// state is the CPU's. Covers sizes that are not multiples of the group size or of P, both
// directions, 4 and 8 bits, compensation and backward rescaling on and off (including exponents
// beyond 127, where scale_pow2 takes ldexpf), several sites and passes, the poisoned-output and
// non-finite-rescale errors, and the host-staged telemetry fallback.
// Needs MPI and a GPU (the ranks share one device; this path uses MPI, not NCCL): registered by
// hand in tests/comm/CMakeLists.txt under labels mpi and gpu. Skips without a CUDA device on every
// rank alike (one machine); fails instead under ECHO_REQUIRE_GPU=1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../support/cuda_pool.h"
#include "../support/gpu_test.h"
#include "../support/node_local_gpu.h"
#include "../support/test_data.h"
#include "comm/echo/device_state_bytes.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/make_all_reduce.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace echo::comm {
namespace {

using echo::testing::random_normal;

// Each rank on GPU local_rank % count (tests/support/node_local_gpu.h): several GPUs test the
// cross-GPU paths; ECHO_TEST_SAME_GPU=1 keeps them all on one.
const ::testing::Environment* const kNodeLocalGpu =
    ::testing::AddGlobalTestEnvironment(new echo::testing::NodeLocalGpu);

dist::Communicator world() { return dist::Communicator::borrow(MPI_COMM_WORLD); }

struct Case {
  size_t n;
  Direction direction;
  int bits;
  bool compensate;
  bool rescale;
};

std::string describe(const Case& c, bool bf16) {
  return fmt::format("n {} {} {}-bit compensate {} rescale {} {}", c.n, to_string(c.direction), c.bits, c.compensate,
                     c.rescale, bf16 ? "bf16" : "f32");
}

EchoOptions options_for(const Case& c) {
  EchoOptions o;
  o.quant = {QuantPolicy::asym_zero_aware, c.bits, 128};
  o.compensate = c.compensate;
  o.backward_rescale = c.rescale;
  return o;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

std::vector<uint32_t> bits_of(std::span<const float> v) { return bits_of(std::vector<float>(v.begin(), v.end())); }

// Every rank must hold the same bytes as rank 0.
void expect_same_on_all_ranks(const std::vector<uint32_t>& v, const std::string& what) {
  std::vector<uint32_t> root = v;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_UINT32_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(root, v) << what << ": differs from rank 0";
}

// This rank's contribution at (pass, site): magnitudes vary per site, and site 2 of a backward
// pass is tiny (max below 2^-117, so the rescale exponent exceeds 127).
std::vector<float> contribution(const Case& c, int pass, int site, int rank) {
  const float scale = site == 2 && c.direction == Direction::backward ? 1e-37f : std::ldexp(0.1f, site - pass);
  return random_normal(c.n, 7919 * c.n + 131 * pass + site, static_cast<uint64_t>(rank), 0.01f * scale, scale);
}

void run_case(const Case& c, bool bf16) {
  SCOPED_TRACE(describe(c, bf16));
  const auto comm = world();
  const EchoOptions o = options_for(c);
  EchoAllReduce cpu(comm, o);
  EchoAllReduce dev(comm, o);
  const int64_t n = static_cast<int64_t>(c.n);
  for (int pass = 0; pass < 2; ++pass) {
    cpu.begin_pass(c.direction);
    dev.begin_pass(c.direction);
    for (int site = 0; site < 4; ++site) {
      SCOPED_TRACE(fmt::format("pass {} site {}", pass, site));
      std::vector<float> x = contribution(c, pass, site, comm.rank());
      std::vector<uint16_t> x_bf16(c.n);
      if (bf16)
        for (size_t i = 0; i < c.n; ++i) {
          x_bf16[i] = float_to_bf16_bits(x[i]);
          x[i] = bf16_bits_to_float(x_bf16[i]);  // the CPU reference reduces the widened values
        }
      Tensor t = bf16 ? Tensor::from_vector(x_bf16, {n}, DType::bf16).to(Device::cuda)
                      : Tensor::from_vector(x, {n}).to(Device::cuda);
      std::vector<float> want = x;
      const Site s{site, c.direction};
      cpu.all_reduce(std::span<float>(want), s);
      dev.all_reduce(t, s);
      const Tensor got = t.to(Device::cpu);
      ASSERT_EQ(got.dtype(), bf16 ? DType::bf16 : DType::f32);
      if (bf16) {
        std::vector<uint16_t> want_bits(c.n), got_bits(c.n);
        for (size_t i = 0; i < c.n; ++i) want_bits[i] = float_to_bf16_bits(want[i]);
        std::memcpy(got_bits.data(), got.raw(), c.n * sizeof(uint16_t));
        // NOTE: EXPECT, not ASSERT, before a collective: a rank returning alone would leave the
        // others in expect_same_on_all_ranks' broadcast; all stop together below.
        EXPECT_EQ(got_bits, want_bits);
        std::vector<uint32_t> widened(c.n);
        for (size_t i = 0; i < c.n; ++i) widened[i] = got_bits[i];
        expect_same_on_all_ranks(widened, "bf16 output");
      } else {
        std::vector<float> got_values(c.n);
        std::memcpy(got_values.data(), got.raw(), c.n * sizeof(float));
        EXPECT_EQ(bits_of(got_values), bits_of(want));
        expect_same_on_all_ranks(bits_of(got_values), "output");
      }
      if (!comm.all_ranks(!::testing::Test::HasFailure())) return;  // every rank stops at the first failure
    }
    if (c.compensate) {
      ASSERT_NE(dev.device_path(), nullptr);
      EXPECT_EQ(bits_of(dev.device_path()->m1(c.direction)), bits_of(cpu.compensator(c.direction).m1())) << "m1";
      EXPECT_EQ(bits_of(dev.device_path()->m2(c.direction)), bits_of(cpu.compensator(c.direction).m2())) << "m2";
    }
  }
}

std::vector<Case> cases() {
  const size_t P = static_cast<size_t>(world().size());
  std::vector<Case> out;
  for (size_t n : {size_t{1}, size_t{77}, 128 * P, 128 * P * 3 + 5, size_t{4096} + 37})
    for (Direction d : {Direction::forward, Direction::backward})
      for (int bits : {4, 8}) out.push_back({n, d, bits, true, d == Direction::backward});
  // Compensation and rescaling off, and each alone.
  for (bool compensate : {false, true})
    for (bool rescale : {false, true}) out.push_back({1000, Direction::backward, 4, compensate, rescale});
  out.push_back({1000, Direction::forward, 8, false, false});
  return out;
}

TEST(EchoDeviceQar, F32MatchesCpuBitwise) {
  ECHO_REQUIRE_DEVICE();
  for (const Case& c : cases()) run_case(c, false);
}

TEST(EchoDeviceQar, Bf16IsCpuResultRoundedOnce) {
  ECHO_REQUIRE_DEVICE();
  for (const Case& c : cases()) run_case(c, true);
}

// Telemetry falls back to the host-staged path: the result and the host compensator state are
// then the CPU's exactly (host staging of f32 is lossless).
TEST(EchoDeviceQar, TelemetryIsHostStaged) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = world();
  const Case c{1000, Direction::forward, 4, true, false};
  EchoOptions o = options_for(c);
  o.telemetry = true;
  EchoAllReduce cpu(comm, o);
  EchoAllReduce dev(comm, o);
  cpu.begin_pass(c.direction);
  dev.begin_pass(c.direction);
  for (int site = 0; site < 3; ++site) {
    std::vector<float> want = contribution(c, 0, site, comm.rank());
    Tensor t = Tensor::from_vector(want, {static_cast<int64_t>(c.n)}).to(Device::cuda);
    cpu.all_reduce(std::span<float>(want), {site, c.direction});
    dev.all_reduce(t, {site, c.direction});
    const Tensor got = t.to(Device::cpu);
    std::vector<float> got_values(c.n);
    std::memcpy(got_values.data(), got.raw(), c.n * sizeof(float));
    EXPECT_EQ(bits_of(got_values), bits_of(want));
  }
  EXPECT_EQ(dev.device_path(), nullptr);
  EXPECT_EQ(bits_of(dev.compensator(c.direction).m1()), bits_of(cpu.compensator(c.direction).m1()));
  EXPECT_EQ(dev.telemetry(c.direction).size(), 3u);
}

// A NaN on one rank: every rank raises the CPU's error, with the CPU's text (poisoned output on a
// forward site; the non-finite rescale max on a backward site with rescaling).
TEST(EchoDeviceQar, NonFiniteInputRaisesTheCpuError) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = world();
  for (Direction d : {Direction::forward, Direction::backward}) {
    const Case c{1000, d, 4, true, true};
    const EchoOptions o = options_for(c);
    EchoAllReduce cpu(comm, o);
    EchoAllReduce dev(comm, o);
    cpu.begin_pass(d);
    dev.begin_pass(d);
    std::vector<float> x = contribution(c, 0, 0, comm.rank());
    if (comm.rank() == comm.size() - 1) x[517] = std::numeric_limits<float>::quiet_NaN();
    Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(c.n)}).to(Device::cuda);
    std::string cpu_error, dev_error;
    try {
      cpu.all_reduce(std::span<float>(x), {0, d});
    } catch (const Error& e) {
      cpu_error = e.what();
    }
    try {
      dev.all_reduce(t, {0, d});
    } catch (const Error& e) {
      dev_error = e.what();
    }
    ASSERT_FALSE(cpu_error.empty()) << to_string(d);
    ASSERT_FALSE(dev_error.empty()) << to_string(d);
    // The texts end with " [check ... at file:line]", which names each path's own source: compare the message.
    const auto message = [](const std::string& s) { return s.substr(0, s.rfind(" [")); };
    EXPECT_EQ(message(dev_error), message(cpu_error));
  }
}

// The device state lives in the stream-ordered pool that the start-up reservation fills, and the
// memory plan's bound for it (device_echo_state_bytes) holds: both directions' m1 and m2 at least
// come from the pool, and the pool grows by no more than the bound over a forward and a backward
// pass of the largest size.
TEST(EchoDeviceQar, StateComesFromThePoolWithinThePlansBound) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = world();
  config::CommConfig cfg;
  cfg.bits = 4;
  cfg.group_size = 128;
  const size_t n = 128 * static_cast<size_t>(comm.size()) * 40 + 3;
  using echo::testing::cuda_pool_used_bytes;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const uint64_t before = cuda_pool_used_bytes();
  {
    EchoAllReduce dev(comm, echo_options_from(cfg, 4));
    for (Direction d : {Direction::forward, Direction::backward}) {
      dev.begin_pass(d);
      for (int site = 0; site < 2; ++site) {
        Tensor t =
            Tensor::from_vector(contribution({n, d, 4, true, true}, 0, site, comm.rank()), {static_cast<int64_t>(n)})
                .to(Device::cuda);
        dev.all_reduce(t, {site, d});
      }
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const uint64_t grown = cuda_pool_used_bytes() - before;
    EXPECT_GE(grown, 4 * n * sizeof(float)) << "m1 and m2 of both directions";
    EXPECT_LE(grown, device_echo_state_bytes(cfg, comm.size(), n, false));
  }
}

}  // namespace
}  // namespace echo::comm
