// The pipelined cuda_ipc all-reduce (src/comm/p2p/cuda_ipc_reduce.h) against the MPI two-phase
// engine on the host, which the QAR tests check against hand-computed sums: every quantized codec,
// P = 2, 3, 4, lengths from 1 to many rounds, bit-for-bit equal outputs. Then a stress of
// 150 back-to-back calls of changing shapes and codecs under a time limit, and the faults: a rank that
// never arrives and a rank that calls with another length are errors naming the stage and the
// peer, not hangs or wrong sums. Echo's device sites over cuda_ipc equal the CPU's; the 16-bit
// (bf16) transport and the exact all-reduce built on it equal the host engine's.
// Needs MPI and a GPU (the ranks may share one device: IPC works between processes on one GPU):
// registered by hand in tests/comm/CMakeLists.txt under labels mpi and gpu. Skips without a CUDA
// device on every rank alike; fails instead under ECHO_REQUIRE_GPU=1.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "../support/gpu_test.h"
#include "../support/mpi_util.h"
#include "../support/node_local_gpu.h"
#include "../support/test_data.h"
#include "comm/codec.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/make_all_reduce.h"
#include "comm/p2p/cuda_ipc_reduce.h"
#include "comm/two_phase_reduce.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"

namespace echo::comm {
namespace {

using echo::testing::identical_on_all_ranks;
using echo::testing::on_group;
using echo::testing::random_normal;
using p2p::CudaIpcReduce;
using p2p::CudaIpcWorkspace;
using p2p::P2pGeometry;

// Each rank on GPU local_rank % count (tests/support/node_local_gpu.h): several GPUs test the
// cross-GPU paths; ECHO_TEST_SAME_GPU=1 keeps them all on one.
const ::testing::Environment* const kNodeLocalGpu =
    ::testing::AddGlobalTestEnvironment(new echo::testing::NodeLocalGpu);

// Small slots, so that a few thousand elements already take several rounds. `tiles` also keeps
// the workspaces of the fault tests apart from the others (one workspace per geometry).
P2pGeometry small_geometry(int tiles = 2) {
  P2pGeometry g;
  g.tiles = tiles;
  g.slot_bytes = 1024;
  return g;
}

// NOTE: a peer timeout well under device_check.sh's 60 s per test binary, so a hang is reported by
// the transport (stage and peer) rather than killed by the script.
constexpr double kPeerTimeoutS = 15;

std::unique_ptr<CudaIpcReduce> make_ipc(const dist::Communicator& group, P2pGeometry geometry,
                                        double timeout_s = kPeerTimeoutS) {
  std::string why;
  auto ws = CudaIpcWorkspace::for_group(group, geometry, &why);
  EXPECT_NE(ws, nullptr) << "the ranks of one test run share a node, yet: " << why;
  if (!ws) return nullptr;
  return std::make_unique<CudaIpcReduce>(group, std::move(ws), timeout_s);
}

std::vector<QuantSpec> every_spec() {
  std::vector<QuantSpec> specs;
  for (int bits : {4, 8})
    for (QuantPolicy policy : {QuantPolicy::asym_zero_aware, QuantPolicy::symmetric, QuantPolicy::asym_naive})
      for (int group : {32, 128}) specs.push_back({policy, bits, group});
  return specs;
}

std::string describe(const QuantSpec& s, size_t n) {
  return fmt::format("{}-bit policy {} g {} n {}", s.bits, static_cast<int>(s.policy), s.group_size, n);
}

// One input through both engines; the device output must be the host engine's bit for bit.
void expect_same_bits(CudaIpcReduce& ipc, TwoPhaseReduce& mpi, const QuantSpec& spec, size_t n, uint64_t seed) {
  SCOPED_TRACE(describe(spec, n));
  const auto& comm = mpi.comm();
  const std::vector<float> x = random_normal(n, seed, comm.rank(), 0.2f, 1.0f + 0.5f * comm.rank());
  std::vector<float> want = x;
  const size_t bad_mpi = mpi.run(want, QuantCodec(spec));
  Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
  ASSERT_TRUE(ipc.pipelines(n, spec));
  const size_t bad_ipc = ipc.run(t.data<float>(), n, spec, {3, Direction::forward});
  EXPECT_EQ(bad_ipc, bad_mpi);
  const Tensor back = t.to(Device::cpu);
  std::vector<float> got(n);
  std::memcpy(got.data(), back.raw(), n * sizeof(float));
  // NOTE: EXPECT, not ASSERT: every rank must reach the collective below, or the others hang in it.
  EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << "cuda_ipc and mpi outputs differ";
  EXPECT_TRUE(identical_on_all_ranks(got, comm));
}

TEST(CudaIpcReduce, EqualsTheMpiEngineBitForBitForEveryCodecAndGroupSize) {
  ECHO_REQUIRE_DEVICE();
  for (int size : echo::testing::small_group_sizes())
    on_group(size, [&](const dist::Communicator& group) {
      // The default slots with 2 tiles a round: a 9M-element call takes 10 rounds at P = 2, 7 at
      // P = 3, 5 at P = 4 (246,656 elements per 4-bit g128 tile). NOTE: not with the 1 KiB slots, where it would take over a
      // thousand rounds, each a handoff between ranks that time-slice one GPU.
      P2pGeometry two_tiles;
      two_tiles.tiles = 2;
      for (const P2pGeometry& geometry : {small_geometry(), P2pGeometry{}, two_tiles}) {
        SCOPED_TRACE(fmt::format("P {} slot {} tiles {}", size, geometry.slot_bytes, geometry.tiles));
        auto ipc = make_ipc(group, geometry);
        ASSERT_NE(ipc, nullptr);
        TwoPhaseReduce mpi(group);
        for (const QuantSpec& spec : every_spec())
          for (size_t n : {size_t{1}, size_t{127}, size_t{129}, size_t{1000}, size_t{12345}, size_t{70001}})
            expect_same_bits(*ipc, mpi, spec, n, 7 * n + static_cast<size_t>(size));
        if (geometry.slot_bytes == two_tiles.slot_bytes && geometry.tiles == two_tiles.tiles)
          expect_same_bits(*ipc, mpi, QuantSpec{}, size_t{9'000'001}, 99);
      }
    });
}

TEST(CudaIpcReduce, CallsOfChangingShapesStayInStep) {
  ECHO_REQUIRE_DEVICE();
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    // 4 KiB slots: most calls take one or two rounds (a round is a handoff between ranks that
    // time-slice one GPU), and a few take more.
    P2pGeometry geometry = small_geometry();
    geometry.slot_bytes = 4096;
    auto ipc = make_ipc(group, geometry);
    ASSERT_NE(ipc, nullptr);
    TwoPhaseReduce mpi(group);
    const auto specs = every_spec();
    std::mt19937_64 rng(2026);  // the same sequence on every rank
    const auto start = std::chrono::steady_clock::now();
    // Stops at the first failure on any rank, all ranks together (a rank alone would leave the
    // others in a collective).
    for (int call = 0; call < 150 && group.all_ranks(!::testing::Test::HasFailure()); ++call) {
      const QuantSpec& spec = specs[rng() % specs.size()];
      const size_t n = 1 + rng() % 40000;
      expect_same_bits(*ipc, mpi, spec, n, static_cast<uint64_t>(call));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // NOTE: printed, not asserted (a timed test fails on a slow machine, not on a bug): ranks that
    // share one GPU without MPS time-slice, a slice per handoff; what this costs is a number to
    // read in the device check's log. A hang ends in the device waits' timeouts.
    if (group.rank() == 0)
      std::printf("[ timing ] 150 calls of changing shapes: %.2f s at P = %d\n", seconds, group.size());
    EXPECT_LE(ipc->cached_schedules(), 64u);
  });
}

// Runs `call` on rank 0 of a pair whose rank 1 stays away: it must fail with the timeout naming
// `stage`, rank 1 and `site`, within one timeout (not one per tile).
void expect_one_timeout(const std::function<void()>& call, const std::string& stage, const std::string& site) {
  const auto start = std::chrono::steady_clock::now();
  try {
    call();
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("timed out"), std::string::npos) << what;
    EXPECT_NE(what.find(stage), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find(site), std::string::npos) << what;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "one timeout, not one per tile";
}

// Only rank 0 calls: it must get the timeout error naming the push stage, within the timeout and
// not hang; the others stay out of it. The workspace of its own geometry is then dropped.
TEST(CudaIpcReduce, ARankThatNeverArrivesIsATimeoutNamingIt) {
  ECHO_REQUIRE_DEVICE();
  on_group(2, [&](const dist::Communicator& group) {
    auto ipc = make_ipc(group, small_geometry(3), 1.0);
    ASSERT_NE(ipc, nullptr);
    if (group.rank() == 0) {
      Tensor t = Tensor::from_vector(random_normal(5000, 1, 0, 0.1f, 1.0f), {5000}).to(Device::cuda);
      expect_one_timeout([&] { ipc->run(t.data<float>(), 5000, QuantSpec{}, {7, Direction::backward}); },
                         "push stage", "backward site 7");
      // The group is out of step now: later calls refuse to run.
      EXPECT_THROW(ipc->run(t.data<float>(), 5000, QuantSpec{}, {8, Direction::backward}), Error);
    }
    group.barrier();
  });
}

// Sends the input's tiles unchanged, writes the decoded sums into `out`, and keeps a copy of the
// group max that the pipeline reduced before begin().
class PassThroughHooks final : public p2p::DeviceTileHooks {
 public:
  PassThroughHooks(const float* in, float* out, const uint32_t* max_bits, uint32_t* seen)
      : in_(in), out_(out), max_bits_(max_bits), seen_(seen) {}
  void begin(cudaStream_t stream) override {
    if (max_bits_ != nullptr) {
      ASSERT_EQ(cudaMemcpyAsync(seen_, max_bits_, sizeof *seen_, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
    }
  }
  void load(size_t begin, size_t n, float* out, cudaStream_t stream) override {
    ASSERT_EQ(cudaMemcpyAsync(out, in_ + begin, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  }
  void finish(size_t begin, size_t n, const float* sum, cudaStream_t stream) override {
    ASSERT_EQ(cudaMemcpyAsync(out_ + begin, sum, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  }

 private:
  const float* in_;
  float* out_;
  const uint32_t* max_bits_;
  uint32_t* seen_;
};

// The backward rescale's scalar through the workspace headers (run_fused's group_max_bits): every
// rank ends with the largest of the ranks' values (checked against MPI_MAX), before the first load
// (begin() sees it), over calls that alternate the two header slots and calls without a max in
// between; the sum itself is still the MPI engine's bit for bit. Magnitudes from denormal to
// large, and +inf on one rank (a non-finite gradient) once.
TEST(CudaIpcReduce, RescaleMaxGoesThroughTheHeadersOnTheDevice) {
  ECHO_REQUIRE_DEVICE();
  for (int size : echo::testing::small_group_sizes())
    on_group(size, [&](const dist::Communicator& group) {
      auto ipc = make_ipc(group, small_geometry(4));
      ASSERT_NE(ipc, nullptr);
      TwoPhaseReduce mpi(group);
      std::mt19937_64 rng(17 + 1000 * static_cast<uint64_t>(group.rank()));
      const size_t n = 5000;
      for (int call = 0; call < 9 && group.all_ranks(!::testing::Test::HasFailure()); ++call) {
        SCOPED_TRACE(fmt::format("P {} call {}", size, call));
        const bool with_max = call % 3 != 2;
        float local = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f,
                                 static_cast<int>(rng() % 240) - 140);  // 2^-140 (denormal) .. 2^100
        if (call == 4 && group.rank() == group.size() - 1) local = std::numeric_limits<float>::infinity();
        float want_max = 0;
        ASSERT_EQ(MPI_Allreduce(&local, &want_max, 1, MPI_FLOAT, MPI_MAX, group.get()), MPI_SUCCESS);
        const std::vector<float> x = random_normal(n, 40 + static_cast<uint64_t>(call), group.rank(), 0.1f, 1.0f);
        std::vector<float> want = x;
        mpi.run(want, QuantCodec(QuantSpec{}));
        Tensor in = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
        Tensor out = Tensor::from_vector(std::vector<float>(n, 0.0f), {static_cast<int64_t>(n)}).to(Device::cuda);
        const std::vector<uint32_t> local_bits{float_bits(local), 0u};  // [0] reduced, [1] begin()'s copy
        Tensor bits = Tensor::from_vector(std::vector<float>{bits_float(local_bits[0]), 0.0f}, {2}).to(Device::cuda);
        uint32_t* max_bits = reinterpret_cast<uint32_t*>(bits.data<float>());
        PassThroughHooks hooks(in.data<float>(), out.data<float>(), with_max ? max_bits : nullptr, max_bits + 1);
        ipc->run_fused(n, QuantSpec{}, {call, Direction::backward}, hooks, with_max ? max_bits : nullptr);
        const Tensor got = out.to(Device::cpu);
        EXPECT_EQ(std::memcmp(got.raw(), want.data(), n * sizeof(float)), 0) << "the sum";
        const Tensor got_bits = bits.to(Device::cpu);
        uint32_t reduced[2];
        std::memcpy(reduced, got_bits.raw(), sizeof reduced);
        if (with_max) {
          EXPECT_EQ(reduced[0], float_bits(want_max)) << local << " here, " << want_max << " over the group";
          EXPECT_EQ(reduced[1], float_bits(want_max)) << "begin() runs after the max";
        } else {
          EXPECT_EQ(reduced[0], local_bits[0]) << "a call without a max leaves the value alone";
        }
      }
    });
}

// Only rank 0 makes a rescaling call: the wait for rank 1's max times out, naming the stage.
TEST(CudaIpcReduce, ARankThatNeverSendsItsMaxIsATimeoutNamingIt) {
  ECHO_REQUIRE_DEVICE();
  on_group(2, [&](const dist::Communicator& group) {
    auto ipc = make_ipc(group, small_geometry(6), 1.0);
    ASSERT_NE(ipc, nullptr);
    if (group.rank() == 0) {
      const size_t n = 3000;
      Tensor in = Tensor::from_vector(random_normal(n, 3, 0, 0.1f, 1.0f), {3000}).to(Device::cuda);
      Tensor out = Tensor::from_vector(std::vector<float>(n, 0.0f), {3000}).to(Device::cuda);
      Tensor bits = Tensor::from_vector(std::vector<float>{1.0f, 0.0f}, {2}).to(Device::cuda);
      uint32_t* max_bits = reinterpret_cast<uint32_t*>(bits.data<float>());
      PassThroughHooks hooks(in.data<float>(), out.data<float>(), max_bits, max_bits + 1);
      expect_one_timeout([&] { ipc->run_fused(n, QuantSpec{}, {5, Direction::backward}, hooks, max_bits); },
                         "rescale max stage waiting", "backward site 5");
      // After a fault the max is 0, so the site would not note a non-finite max no one raises.
      const Tensor after = bits.to(Device::cpu);
      uint32_t reduced = 1;
      std::memcpy(&reduced, after.raw(), sizeof reduced);
      EXPECT_EQ(reduced, 0u);
      // The group is out of step now: later calls refuse to run.
      EXPECT_THROW(ipc->run_fused(n, QuantSpec{}, {6, Direction::backward}, hooks, max_bits), Error);
    }
    group.barrier();
  });
}

// A NaN on one rank at a fused backward site with rescaling over cuda_ipc: every rank raises the
// CPU's error text (the non-finite max), not the poisoned output that the NaN then causes.
TEST(CudaIpcReduce, FusedSiteRaisesTheCpuErrorForANonFiniteMax) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = dist::Communicator::borrow(MPI_COMM_WORLD);
  EchoOptions o;
  o.backward_rescale = true;
  EchoOptions o_ipc = o;
  o_ipc.transport.kind = TransportKind::cuda_ipc;
  o_ipc.transport.geometry = small_geometry(7);
  o_ipc.transport.peer_timeout_s = kPeerTimeoutS;
  EchoAllReduce cpu(comm, o);
  EchoAllReduce dev(comm, o_ipc);
  const size_t n = 4000;
  std::vector<float> x = random_normal(n, 9, comm.rank(), 0.0f, 1e-3f);
  if (comm.rank() == comm.size() - 1) x[1234] = std::numeric_limits<float>::quiet_NaN();
  Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
  std::string cpu_error, dev_error;
  cpu.begin_pass(Direction::backward);
  dev.begin_pass(Direction::backward);
  try {
    cpu.all_reduce(std::span<float>(x), {2, Direction::backward});
  } catch (const Error& e) {
    cpu_error = e.message();
  }
  try {
    dev.all_reduce(t, {2, Direction::backward});
  } catch (const Error& e) {
    dev_error = e.message();
  }
  ASSERT_NE(dev.device_path(), nullptr);
  EXPECT_STREQ(dev.device_path()->transport(), "cuda_ipc");
  EXPECT_NE(cpu_error.find("non-finite gradient"), std::string::npos) << cpu_error;
  EXPECT_EQ(dev_error, cpu_error);
}

TEST(CudaIpcReduce, ARankCallingWithAnotherLengthIsAnErrorNamingIt) {
  ECHO_REQUIRE_DEVICE();
  on_group(2, [&](const dist::Communicator& group) {
    auto ipc = make_ipc(group, small_geometry(5), 10.0);
    ASSERT_NE(ipc, nullptr);
    const size_t n = group.rank() == 0 ? 3000 : 3000 + 128;
    Tensor t = Tensor::from_vector(random_normal(n, 2, group.rank(), 0.1f, 1.0f), {static_cast<int64_t>(n)})
                   .to(Device::cuda);
    try {
      ipc->run(t.data<float>(), n, QuantSpec{}, {1, Direction::forward});
      ADD_FAILURE() << "expected an error on rank " << group.rank();
    } catch (const Error& e) {
      const std::string what = e.what();
      // Its own mismatch, or the peer's (which then publishes poison: "failed in this call").
      EXPECT_TRUE(what.find("called with") != std::string::npos || what.find("failed in this call") != std::string::npos)
          << what;
      EXPECT_NE(what.find(fmt::format("rank {}", 1 - group.rank())), std::string::npos) << what;
    }
    group.barrier();
  });
}

// Echo's device sites with comm.transport = cuda_ipc, fused (compensator and rescale inside the
// pipeline's tiles) and unfused: every output and the compensator state equal the CPU
// EchoAllReduce's bit for bit, through forward and backward passes with rescaling, with a small
// geometry so that a site spans several rounds.
TEST(CudaIpcReduce, EchoDeviceSitesEqualTheCpuOnesFusedAndUnfused) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = dist::Communicator::borrow(MPI_COMM_WORLD);
  for (bool fuse : {true, false})
  for (Direction d : {Direction::forward, Direction::backward}) {
    EchoOptions o;
    o.quant = {QuantPolicy::asym_zero_aware, 4, 128};
    o.backward_rescale = true;
    EchoOptions o_ipc = o;
    o_ipc.transport.kind = TransportKind::cuda_ipc;
    o_ipc.transport.geometry = small_geometry(1);  // one tile per round
    o_ipc.transport.peer_timeout_s = kPeerTimeoutS;
    o_ipc.fuse = fuse;
    EchoAllReduce cpu(comm, o);
    EchoAllReduce dev(comm, o_ipc);
    const size_t n = 128 * 37 * 4 + 11;  // 1920-element tiles: 3 rounds at P = 4, 5 at P = 2
    for (int pass = 0; pass < 2; ++pass) {
      cpu.begin_pass(d);
      dev.begin_pass(d);
      // Stops at the first failure on any rank, all ranks together (a rank alone would leave the
      // others waiting in the next site's call).
      for (int site = 0; site < 4 && comm.all_ranks(!::testing::Test::HasFailure()); ++site) {
        SCOPED_TRACE(fmt::format("fuse {} {} pass {} site {}", fuse, to_string(d), pass, site));
        std::vector<float> want =
            random_normal(n, 31 * pass + site, static_cast<uint64_t>(comm.rank()), 0.01f, std::ldexp(1.0f, site - 2));
        Tensor t = Tensor::from_vector(want, {static_cast<int64_t>(n)}).to(Device::cuda);
        cpu.all_reduce(std::span<float>(want), {site, d});
        dev.all_reduce(t, {site, d});
        const Tensor got = t.to(Device::cpu);
        EXPECT_EQ(std::memcmp(got.raw(), want.data(), n * sizeof(float)), 0);
      }
      ASSERT_NE(dev.device_path(), nullptr);
      EXPECT_STREQ(dev.device_path()->transport(), "cuda_ipc");
      const auto m1 = dev.device_path()->m1(d);
      ASSERT_EQ(m1.size(), cpu.compensator(d).m1().size());
      EXPECT_EQ(std::memcmp(m1.data(), cpu.compensator(d).m1().data(), m1.size() * sizeof(float)), 0) << "m1";
      const auto m2 = dev.device_path()->m2(d);
      EXPECT_EQ(std::memcmp(m2.data(), cpu.compensator(d).m2().data(), m2.size() * sizeof(float)), 0) << "m2";
    }
  }
}

// A bf16 device tensor through the fused cuda_ipc site: the output is the CPU's f32 result on the
// widened values rounded once to bf16, and the compensator state is the CPU's.
TEST(CudaIpcReduce, FusedBf16SiteIsTheCpuResultRoundedOnce) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = dist::Communicator::borrow(MPI_COMM_WORLD);
  EchoOptions o;
  o.quant = {QuantPolicy::asym_zero_aware, 4, 128};
  o.backward_rescale = true;
  EchoOptions o_ipc = o;
  o_ipc.transport.kind = TransportKind::cuda_ipc;
  o_ipc.transport.geometry = small_geometry(1);  // several rounds
  o_ipc.transport.peer_timeout_s = kPeerTimeoutS;
  EchoAllReduce cpu(comm, o);
  EchoAllReduce dev(comm, o_ipc);
  const size_t n = 128 * 53 * 3 + 3;  // several rounds at P = 2 and 4
  cpu.begin_pass(Direction::backward);
  dev.begin_pass(Direction::backward);
  for (int site = 0; site < 3 && comm.all_ranks(!::testing::Test::HasFailure()); ++site) {
    SCOPED_TRACE(fmt::format("site {}", site));
    std::vector<float> want = random_normal(n, 400 + site, static_cast<uint64_t>(comm.rank()), 0.0f, 0.5f);
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16_bits(want[i]);
      want[i] = bf16_bits_to_float(bits[i]);
    }
    Tensor t = Tensor::from_vector(bits, {static_cast<int64_t>(n)}, DType::bf16).to(Device::cuda);
    cpu.all_reduce(std::span<float>(want), {site, Direction::backward});
    dev.all_reduce(t, {site, Direction::backward});
    const Tensor got = t.to(Device::cpu);
    std::vector<uint16_t> got_bits(n), want_bits(n);
    std::memcpy(got_bits.data(), got.raw(), n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) want_bits[i] = float_to_bf16_bits(want[i]);
    EXPECT_EQ(got_bits, want_bits);
  }
  const auto m1 = dev.device_path()->m1(Direction::backward);
  ASSERT_EQ(m1.size(), n);
  EXPECT_EQ(std::memcmp(m1.data(), cpu.compensator(Direction::backward).m1().data(), n * sizeof(float)), 0);
}

// The 16-bit transport (bits 16: bf16 on the wire, fp32 owner sum) against the host engine with
// Bf16Codec: the same bits and the same count of non-finite outputs, lengths from one element to
// many rounds, a NaN included in one call.
TEST(CudaIpcReduce, Bf16TransportEqualsTheMpiEngineBitForBit) {
  ECHO_REQUIRE_DEVICE();
  for (int size : echo::testing::small_group_sizes())
    on_group(size, [&](const dist::Communicator& group) {
      auto ipc = make_ipc(group, small_geometry());
      ASSERT_NE(ipc, nullptr);
      TwoPhaseReduce mpi(group);
      // Up to 100003 elements: about 50 rounds of the 1 KiB slots (512 bf16 elements) at P = 2.
      for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{1000}, size_t{70001}, size_t{100'003}}) {
        SCOPED_TRACE(fmt::format("P {} n {}", size, n));
        std::vector<float> x = random_normal(n, 11 * n, group.rank(), 0.1f, 1.0f + group.rank());
        if (n == 1000 && group.rank() == 1) x[517] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> want = x;
        const size_t bad_mpi = mpi.run(want, Bf16Codec());
        Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(n)}).to(Device::cuda);
        ASSERT_TRUE(ipc->pipelines_bf16(n));
        const size_t bad_ipc = ipc->run_bf16(t.data<float>(), n, {1, Direction::backward});
        EXPECT_EQ(bad_ipc, bad_mpi);
        EXPECT_EQ(bad_mpi, n == 1000 ? size_t{1} : size_t{0});
        const Tensor back = t.to(Device::cpu);
        EXPECT_EQ(std::memcmp(back.raw(), want.data(), n * sizeof(float)), 0) << "cuda_ipc and mpi outputs differ";
      }
    });
}

// The exact 16-bit all-reduce that make_exact_all_reduce builds under comm.transport: cuda_ipc on
// ranks sharing a GPU: f32 and bf16 device tensors give the host ExactAllReduce's result.
TEST(CudaIpcReduce, ExactAllReduceOverCudaIpcEqualsTheHostOne) {
  ECHO_REQUIRE_DEVICE();
  const auto comm = dist::Communicator::borrow(MPI_COMM_WORLD);
  TransportOptions t;
  t.kind = TransportKind::cuda_ipc;
  t.geometry = small_geometry(3);
  t.peer_timeout_s = kPeerTimeoutS;
  auto dev = make_exact_all_reduce(comm, ExactPrecision::bf16, config::Device::cuda, t);
  // NOTE: the decision is collective, so every rank skips or none does.
  if (describe(*dev).rfind("nccl", 0) == 0) GTEST_SKIP() << "each rank has its own GPU here: NCCL serves them";
  ExactAllReduce host(comm, ExactPrecision::bf16);
  EXPECT_EQ(describe(*dev), "exact over cuda_ipc");
  const size_t n = 25'013;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype == DType::f32 ? "f32" : "bf16");
    std::vector<float> want = random_normal(n, 77, comm.rank(), 0.0f, 2.0f);
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16_bits(want[i]);
      if (dtype == DType::bf16) want[i] = bf16_bits_to_float(bits[i]);
    }
    Tensor x = dtype == DType::f32 ? Tensor::from_vector(want, {static_cast<int64_t>(n)}).to(Device::cuda)
                                   : Tensor::from_vector(bits, {static_cast<int64_t>(n)}, DType::bf16).to(Device::cuda);
    host.all_reduce(std::span<float>(want), {0, Direction::forward});
    dev->all_reduce(x, {0, Direction::forward});
    const Tensor got = x.to(Device::cpu);
    if (dtype == DType::f32) {
      EXPECT_EQ(std::memcmp(got.raw(), want.data(), n * sizeof(float)), 0);
    } else {
      std::vector<uint16_t> got_bits(n), want_bits(n);
      std::memcpy(got_bits.data(), got.raw(), n * sizeof(uint16_t));
      for (size_t i = 0; i < n; ++i) want_bits[i] = float_to_bf16_bits(want[i]);
      EXPECT_EQ(got_bits, want_bits);
    }
  }
}

}  // namespace
}  // namespace echo::comm
