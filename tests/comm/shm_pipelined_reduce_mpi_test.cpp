// The pipelined shared-memory all-reduce against the MPI two-phase engine, which the QAR tests
// check against hand-computed sums: every codec, P = 2, 3, 4, lengths from 1 to many rounds,
// and bit-for-bit equal outputs. Then the faults: a rank that never arrives and a rank that
// calls with another length are errors naming the peer, not hangs or wrong sums; and a stress
// of thousands of back-to-back calls of changing shapes and codecs. With threads > 1, lanes 1..
// run on the engine's parked workers (LanePool): thousands of calls on 2 and 3 threads equal one
// thread bit for bit, and an error in a worker lane reaches the caller without a hang.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "../support/mpi_util.h"
#include "../support/test_data.h"
#include "../support/test_util.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/p2p/shm_pipelined_reduce.h"
#include "comm/two_phase_reduce.h"
#include "core/error.h"
#include "core/hd.h"
#include "dist/collective_watchdog.h"

namespace echo::comm {
namespace {

using echo::testing::identical_on_all_ranks;
using echo::testing::on_group;
using echo::testing::random_normal;
using p2p::P2pGeometry;
using p2p::ShmPipelinedReduce;
using p2p::ShmWorkspace;


// A small geometry, so that a few thousand elements already take several rounds.
P2pGeometry small_geometry() {
  P2pGeometry g;
  g.tiles = 2;
  g.slot_bytes = 1024;
  return g;
}

// Four tiles a round, so that up to four threads each have slots.
P2pGeometry four_tile_geometry() {
  P2pGeometry g = small_geometry();
  g.tiles = 4;
  return g;
}

std::unique_ptr<ShmPipelinedReduce> make_shm(const dist::Communicator& group, P2pGeometry geometry,
                                             double timeout_s = 60, int threads = 1) {
  std::string why;
  auto ws = ShmWorkspace::for_group(group, geometry, &why);
  EXPECT_NE(ws, nullptr) << "the ranks of one test run share a node, yet: " << why;
  if (!ws) return nullptr;
  return std::make_unique<ShmPipelinedReduce>(group, std::move(ws), timeout_s, threads);
}

struct NamedCodec {
  std::string name;
  std::unique_ptr<SegmentCodec> codec;
};

std::vector<NamedCodec> every_codec() {
  std::vector<NamedCodec> c;
  c.push_back({"fp32", std::make_unique<Fp32Codec>()});
  c.push_back({"bf16", std::make_unique<Bf16Codec>()});
  for (int bits : {4, 8})
    for (QuantPolicy policy : {QuantPolicy::asym_zero_aware, QuantPolicy::symmetric, QuantPolicy::asym_naive}) {
      QuantSpec spec;
      spec.bits = bits;
      spec.policy = policy;
      spec.group_size = bits == 4 ? 128 : 32;
      c.push_back({fmt::format("q{}/{}", bits, static_cast<int>(policy)), std::make_unique<QuantCodec>(spec)});
    }
  QuantSpec big;  // one group (8 KiB) larger than a small slot: served by the MPI fallback
  big.bits = 8;
  big.group_size = 8192;
  c.push_back({"q8/g8192", std::make_unique<QuantCodec>(big)});
  return c;
}

// Runs one input through both engines and returns whether they agree bit for bit.
void expect_same_bits(SegmentReduce& shm, TwoPhaseReduce& mpi, const SegmentCodec& codec, size_t n, uint64_t seed,
                      const std::string& what) {
  const auto& comm = mpi.comm();
  const std::vector<float> x = random_normal(n, seed, comm.rank(), 0.2f, 1.0f + 0.5f * comm.rank());
  std::vector<float> a = x, b = x;
  const size_t bad_shm = shm.run(a, codec, {3, Direction::forward});
  const size_t bad_mpi = mpi.run(b, codec);
  EXPECT_EQ(bad_shm, bad_mpi) << what;
  ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << what << ": shm and mpi outputs differ";
  EXPECT_TRUE(identical_on_all_ranks(a, comm)) << what;
  EXPECT_NE(std::memcmp(a.data(), x.data(), n * sizeof(float)), 0) << what << ": the sum must change x";
}

TEST(ShmPipelinedReduce, EqualsTheMpiEngineBitForBitForEveryCodecAndGroupSize) {
  const auto codecs = every_codec();
  for (int size : echo::testing::small_group_sizes()) {
    on_group(size, [&](const dist::Communicator& group) {
      for (const P2pGeometry& geometry : {small_geometry(), P2pGeometry{}})
        for (int threads : {1, 2}) {
          auto shm = make_shm(group, geometry, 60, threads);
          ASSERT_NE(shm, nullptr);
          TwoPhaseReduce mpi(group);
          for (const auto& c : codecs)
            for (size_t n : {size_t{1}, size_t{127}, size_t{129}, size_t{1000}, size_t{12345}, size_t{70001}})
              expect_same_bits(*shm, mpi, *c.codec, n, 7 * n + size,
                               "P=" + std::to_string(size) + " slot=" + std::to_string(geometry.slot_bytes) +
                                   " threads=" + std::to_string(threads) + " codec=" + c.name +
                                   " n=" + std::to_string(n));
        }
    });
  }
}

TEST(ShmPipelinedReduce, AGroupSpanningRoundsUsesTheCachedSchedule) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry());
    ASSERT_NE(shm, nullptr);
    TwoPhaseReduce mpi(group);
    Bf16Codec bf16;
    for (int repeat = 0; repeat < 3; ++repeat)
      for (size_t n : {size_t{4000}, size_t{900}})
        expect_same_bits(*shm, mpi, bf16, n, 100 + repeat, "repeat " + std::to_string(repeat));
    EXPECT_EQ(shm->cached_schedules(), 2u) << "two shapes, one codec: two schedules";
    const auto& t = shm->times();
    EXPECT_GT(t.encode_s + t.reduce_s + t.copy_s + t.decode_s, 0.0);
  });
}

// Echo over shm equals Echo over MPI through whole passes: compensator, backward rescale,
// telemetry (an fp32 reduce), and the exact fallback of a direction, sharing one workspace.
TEST(ShmPipelinedReduce, EchoPassesAreIdenticalOverBothTransports) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    EchoOptions o;
    o.quant.bits = 4;
    o.num_layers = 3;
    o.early_site_8bit = true;
    o.telemetry = true;
    o.backward = true;
    EchoOptions shm_o = o;
    shm_o.transport.kind = TransportKind::shm;
    EchoAllReduce via_mpi(group, o), via_shm(group, shm_o);
    for (int step = 0; step < 3; ++step)
      for (Direction d : {Direction::forward, Direction::backward}) {
        via_mpi.begin_pass(d);
        via_shm.begin_pass(d);
        for (int site = 0; site < 6; ++site) {
          const float scale = d == Direction::backward ? 1e-6f : 1.0f;
          std::vector<float> x = random_normal(3000, 40 + step, 10 * site + group.rank(), 0.1f, scale);
          std::vector<float> y = x;
          via_mpi.all_reduce(std::span<float>(x), {site, d});
          via_shm.all_reduce(std::span<float>(y), {site, d});
          ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
              << "step " << step << " " << to_string(Site{site, d});
        }
        ASSERT_EQ(via_mpi.telemetry(d).size(), via_shm.telemetry(d).size());
      }
  });
}

// Echo's unquantized direction (here the forward) runs the exact bf16 all-reduce on Echo's own
// engine, not a second one with its own lane threads: every call of the site, of either
// direction, counts on engine(); and the interleaved exact and quantized calls on the shared
// engine, on 2 threads, equal separate MPI engines bit for bit.
TEST(ShmPipelinedReduce, EchosUnquantizedDirectionSharesItsEngineAndStaysExact) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    EchoOptions o;
    o.quant.bits = 4;
    o.forward = false;
    o.backward = true;
    EchoOptions shm_o = o;
    shm_o.transport.kind = TransportKind::shm;
    shm_o.transport.geometry = four_tile_geometry();
    shm_o.transport.threads = 2;
    EchoAllReduce via_mpi(group, o), via_shm(group, shm_o);
    ASSERT_STREQ(via_shm.engine()->transport(), "shm");
    via_shm.engine()->reset_times();
    int calls = 0;
    for (int step = 0; step < 3; ++step)
      for (Direction d : {Direction::forward, Direction::backward}) {
        via_mpi.begin_pass(d);
        via_shm.begin_pass(d);
        for (int site = 0; site < 4; ++site) {
          // One size a pass (the compensator's), one to several rounds of tiles across the steps.
          const size_t n = 700 + 1500 * static_cast<size_t>(step);
          std::vector<float> x = random_normal(n, 70 + step, 10 * site + group.rank(), 0.1f, 1.0f);
          std::vector<float> y = x;
          via_mpi.all_reduce(std::span<float>(x), {site, d});
          via_shm.all_reduce(std::span<float>(y), {site, d});
          ++calls;
          ASSERT_EQ(std::memcmp(x.data(), y.data(), n * sizeof(float)), 0)
              << "step " << step << " " << to_string(Site{site, d});
        }
      }
    EXPECT_EQ(via_shm.engine()->times().calls, calls) << "the exact direction ran on another engine";
  });
}

// The fused compensator and rescale (FusedEchoSite inside the shm pipeline) against the unfused
// reference on the same transport and over MPI: bit for bit through passes of both directions,
// with gradients small enough that the rescale exponent matters, over several rounds of tiles.
TEST(ShmPipelinedReduce, FusedSitesEqualTheUnfusedReferenceBitForBit) {
  for (int size : echo::testing::small_group_sizes()) {
    on_group(size, [&](const dist::Communicator& group) {
      EchoOptions o;
      o.quant.bits = 4;
      o.num_layers = 3;
      o.early_site_8bit = true;
      EchoOptions fused = o, unfused = o;
      fused.transport.kind = unfused.transport.kind = TransportKind::shm;
      fused.transport.geometry = unfused.transport.geometry = small_geometry();
      fused.transport.threads = 2;  // the hooks run on two threads, each on its own tiles
      unfused.fuse = false;
      EchoAllReduce via_mpi(group, o), via_fused(group, fused), via_unfused(group, unfused);
      for (int step = 0; step < 2; ++step)
        for (Direction d : {Direction::forward, Direction::backward}) {
          for (EchoAllReduce* ar : {&via_mpi, &via_fused, &via_unfused}) ar->begin_pass(d);
          for (int site = 0; site < 6; ++site) {
            const float scale = d == Direction::backward ? 3e-7f : 1.0f;
            const std::vector<float> x = random_normal(5000, 60 + step, 10 * site + group.rank(), 0.1f, scale);
            std::vector<float> a = x, b = x, c = x;
            via_mpi.all_reduce(std::span<float>(a), {site, d});
            via_fused.all_reduce(std::span<float>(b), {site, d});
            via_unfused.all_reduce(std::span<float>(c), {site, d});
            const std::string where = "P=" + std::to_string(size) + " step " + std::to_string(step) + " " +
                                      to_string(Site{site, d});
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << where << ": fused vs mpi";
            ASSERT_EQ(std::memcmp(b.data(), c.data(), b.size() * sizeof(float)), 0) << where << ": fused vs unfused";
          }
          // The compensator state, not only the outputs, is the same.
          const auto& m_mpi = via_mpi.compensator(d).m1();
          const auto& m_fused = via_fused.compensator(d).m1();
          ASSERT_EQ(m_mpi.size(), m_fused.size());
          EXPECT_EQ(std::memcmp(m_mpi.data(), m_fused.data(), m_mpi.size() * sizeof(float)), 0);
          EXPECT_NE(m_fused[0], 0.0f);
        }
    });
  }
}

TEST(ShmPipelinedReduce, GroupMaxEqualsMpiMaxAcrossBackToBackCalls) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry());
    ASSERT_NE(shm, nullptr);
    TwoPhaseReduce mpi(group);
    for (int call = 0; call < 200; ++call) {
      // Back to back with no exchange between them: the two header slots must not be overrun.
      float local = random_normal(1, call, group.rank())[0] * 100.0f;
      if (call % 37 == 5 && group.rank() == group.size() - 1) local = std::numeric_limits<float>::infinity();
      const float a = shm->group_max(local, {call % 4, Direction::backward});
      const float b = mpi.group_max(local, {call % 4, Direction::backward});
      ASSERT_EQ(float_bits(a), float_bits(b)) << "call " << call;
    }
  });
}

TEST(ShmPipelinedReduce, ThousandsOfCallsOfChangingShapesStayExact) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry(), 30, 2);
    ASSERT_NE(shm, nullptr);
    TwoPhaseReduce mpi(group);
    const auto codecs = every_codec();
    std::mt19937 shapes(12345);  // the same sequence on every rank
    const auto start = std::chrono::steady_clock::now();
    for (int call = 0; call < 3000; ++call) {
      const size_t n = 1 + shapes() % 3000;
      const auto& c = codecs[shapes() % codecs.size()];
      std::vector<float> x = random_normal(n, call, group.rank());
      if (call % 50 == 0) {
        expect_same_bits(*shm, mpi, *c.codec, n, call, "call " + std::to_string(call));
      } else {
        shm->run(x, *c.codec, {0, Direction::forward});
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 240.0) << "3000 small calls should take seconds, even oversubscribed";
  });
}

// Expects body to throw an echo::Error whose message holds every piece of `pieces`.
template <class F>
void expect_error_with(F body, std::vector<std::string> pieces) {
  try {
    body();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const auto& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// x' = x / 2 on load, x <- sum - x on finish: element by element, so any split of the tiles
// among threads gives the same bits.
class HalveHooks : public TileHooks {
 public:
  void load(const float* x, size_t begin, size_t n, float* out) const override {
    for (size_t i = 0; i < n; ++i) out[i] = 0.5f * x[begin + i];
  }
  void finish(float* x, size_t begin, size_t n, const float* y) override {
    for (size_t i = 0; i < n; ++i) x[begin + i] = y[i] - x[begin + i];
  }
};

// HalveHooks whose load fails on every thread but the one that made it: only worker lanes fail.
class FailingOnWorkers : public HalveHooks {
 public:
  void load(const float* x, size_t begin, size_t n, float* out) const override {
    ECHO_CHECK(std::this_thread::get_id() == caller_, "tile hook failed on a worker thread at element {}", begin);
    HalveHooks::load(x, begin, n, out);
  }

 private:
  std::thread::id caller_ = std::this_thread::get_id();
};

TEST(ShmPipelinedReduce, ThousandsOfCallsOnTheWorkerPoolEqualOneThreadBitForBit) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    const auto codecs = every_codec();
    for (int threads : {2, 3}) {
      // Both engines share the group's workspace; every rank makes the same calls in turn.
      auto one = make_shm(group, four_tile_geometry(), 30, 1);
      auto pooled = make_shm(group, four_tile_geometry(), 30, threads);
      ASSERT_NE(one, nullptr);
      ASSERT_NE(pooled, nullptr);
      std::mt19937 shapes(777 + threads);  // the same sequence on every rank
      const auto start = std::chrono::steady_clock::now();
      for (int call = 0; call < 2000; ++call) {
        const size_t n = 1 + shapes() % 6000;
        const auto& c = codecs[shapes() % codecs.size()];
        const bool fused = shapes() % 4 == 0;
        const std::vector<float> x = random_normal(n, 1000 * threads + call, group.rank(), 0.1f, 1.0f + group.rank());
        std::vector<float> a = x, b = x;
        const Site site{call % 5, Direction::forward};
        size_t bad_one, bad_pooled;
        if (fused) {
          HalveHooks h1, h2;
          bad_one = one->run_fused(a, *c.codec, site, h1);
          bad_pooled = pooled->run_fused(b, *c.codec, site, h2);
        } else {
          bad_one = one->run(a, *c.codec, site);
          bad_pooled = pooled->run(b, *c.codec, site);
        }
        const std::string what = "threads=" + std::to_string(threads) + " call " + std::to_string(call) +
                                 " n=" + std::to_string(n) + " codec=" + c.name + (fused ? " fused" : "");
        ASSERT_EQ(bad_one, bad_pooled) << what;
        ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << what << ": 1 thread and the pool differ";
        ASSERT_NE(std::memcmp(b.data(), x.data(), n * sizeof(float)), 0) << what << ": the sum must change x";
        if (call % 100 == 0 && !fused) {  // fused: x <- sum - x differs per rank
          EXPECT_TRUE(identical_on_all_ranks(b, group)) << what;
        }
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 240.0) << "threads=" << threads << ": 2 x 2000 calls of <= 6000 values, even oversubscribed";
      if (group.rank() == 0)
        std::printf("[ info ] threads=%d: 2 x 2000 calls in %.2f s (1 thread and the pool, alternating)\n", threads,
                    seconds);
    }
  });
}

TEST(ShmPipelinedReduce, AnErrorInEveryRanksWorkerLanesReachesTheCallerAndTheNextCallIsExact) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    for (int threads : {2, 3}) {
      auto one = make_shm(group, four_tile_geometry(), 30, 1);
      auto pooled = make_shm(group, four_tile_geometry(), 30, threads);
      ASSERT_NE(pooled, nullptr);
      Bf16Codec bf16;
      // Every rank's workers fail on their first tile, before they publish a flag; lane 0 needs
      // only the peers' lanes 0, so it finishes, and no rank waits for a flag that never comes.
      std::vector<float> x = random_normal(20000, 3, group.rank());
      FailingOnWorkers failing;
      const auto start = std::chrono::steady_clock::now();
      expect_error_with([&] { pooled->run_fused(x, bf16, {2, Direction::forward}, failing); },
                        {"tile hook failed on a worker thread"});
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 10.0) << "no lane waited for the peer timeout (30 s)";
      // The pool runs the next calls as before, bit for bit.
      for (int call = 0; call < 20; ++call) {
        const std::vector<float> y = random_normal(3000 + 997 * call, 50 + call, group.rank());
        std::vector<float> a = y, b = y;
        HalveHooks h1, h2;
        one->run_fused(a, bf16, {1, Direction::backward}, h1);
        pooled->run_fused(b, bf16, {1, Direction::backward}, h2);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << "threads=" << threads << " call " << call << " after the error";
      }
    }
  });
}

TEST(ShmPipelinedReduce, ARankThatNeverArrivesIsATimeoutNamingItNotAHang) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry(), 1.0);
    ASSERT_NE(shm, nullptr);
    const int absent = group.size() - 1;
    Bf16Codec bf16;
    std::vector<float> x = random_normal(5000, 1, group.rank());
    if (group.rank() != absent) {
      const auto start = std::chrono::steady_clock::now();
      // A run error: the peer's fault, said without echo's own "[at file:line]".
      const std::string error = echo::testing::kind_and_what_of([&] { shm->run(x, bf16, {5, Direction::backward}); });
      for (const std::string& piece : {std::string("run: shm all-reduce at backward site 5: timed out"),
                                       "waiting for rank " + std::to_string(absent), std::string("push")})
        EXPECT_NE(error.find(piece), std::string::npos) << error;
      EXPECT_EQ(error.find("[at "), std::string::npos) << error;
      EXPECT_EQ(error.find("[check "), std::string::npos) << error;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(waited, 30.0);
    }
    group.barrier();  // the absent rank waits here until the others gave up
  });
}

// In a group numbered otherwise than the world (ranks in reverse), the timeout names the world
// rank mpirun and the logs know, then the group's; and a stopped peer is named as stopped, from
// the node's progress board (dist/collective_watchdog.h), which the others read before they
// continue it.
TEST(ShmPipelinedReduce, AStoppedPeerIsNamedByItsWorldRankAndAsStopped) {
  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  dist::watch_peers_on_node();
  std::vector<int> pids(static_cast<size_t>(world.size()));
  const int mine = static_cast<int>(getpid());
  MPI_Allgather(&mine, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const dist::Communicator group = world.split(0, world.size() - 1 - world.rank());
  const int absent_world = world.size() - 1;  // rank 0 of the group
  // The ranks that wait: each reads the board before any of them continues the stopped one.
  const dist::Communicator waiting = world.split(world.rank() == absent_world ? 1 : 0, world.rank());
  auto shm = make_shm(group, small_geometry(), 1.0);
  ASSERT_NE(shm, nullptr);
  Bf16Codec bf16;
  std::vector<float> x = random_normal(5000, 3, group.rank());
  if (world.rank() == absent_world) {
    raise(SIGSTOP);
  } else {
    const std::string error = echo::testing::kind_and_what_of([&] { shm->run(x, bf16, {5, Direction::backward}); });
    waiting.barrier();
    kill(pids[static_cast<size_t>(absent_world)], SIGCONT);
    for (const std::string& piece :
         {std::string("run: shm all-reduce at backward site 5: timed out"),
          fmt::format(
              "in the push stage waiting for rank {0} (rank 0 of the group) (comm.peer_timeout_s = 1); rank {0} "
              "(pid {1}) is stopped (SIGSTOP or Ctrl-Z)",
              absent_world, pids[static_cast<size_t>(absent_world)])})
      EXPECT_NE(error.find(piece), std::string::npos) << error;
  }
  group.barrier();  // the stopped rank waits here once continued
}

// A rank stopped while it waits for a peer (here by that peer, for longer than the limit) does
// not count the stop as waiting: once continued, it completes the call with the peer.
TEST(ShmPipelinedReduce, TimeThisRankWasStoppedIsNotAWaitForItsPeer) {
  on_group(2, [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry(), 1.5);
    ASSERT_NE(shm, nullptr);
    int pid = static_cast<int>(getpid()), peer_pid = 0;
    MPI_Sendrecv(&pid, 1, MPI_INT, 1 - group.rank(), 0, &peer_pid, 1, MPI_INT, 1 - group.rank(), 0, group.get(),
                 MPI_STATUS_IGNORE);
    Bf16Codec bf16;
    std::vector<float> x = random_normal(5000, 4, group.rank());
    if (group.rank() == 1) {  // rank 0 is waiting for this one's push when it is stopped
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kill(peer_pid, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      kill(peer_pid, SIGCONT);
      // Rank 0 looks at its clock (every 64 polls: milliseconds) before this rank arrives.
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
    EXPECT_NO_THROW(shm->run(x, bf16, {6, Direction::forward})) << "rank " << group.rank();
    group.barrier();
  });
}

// One rank's worker lanes fail; on the other ranks only the worker lanes, which wait for that
// rank's slots 1.., time out, while lane 0 finishes. Then the same with a rank that never calls,
// where every lane times out. Either way the caller gets the timeout naming the site, and the
// engine (its pool) is destroyed at once.
TEST(ShmPipelinedReduce, ATimeoutInAWorkerLaneReachesTheCallerNamingTheSiteAndTheEngineGoes) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    const int faulty = group.size() - 1;
    const std::string faulty_rank = "rank " + std::to_string(faulty);
    Bf16Codec bf16;
    for (int threads : {2, 3})
      for (bool never_calls : {false, true}) {
        // Held here, so that destroying the engine below is the pool alone: freeing the workspace
        // is collective, and would wait for the ranks still waiting for the timeout.
        auto ws = ShmWorkspace::for_group(group, four_tile_geometry());
        auto shm = make_shm(group, four_tile_geometry(), 1.0, threads);
        ASSERT_NE(shm, nullptr);
        std::vector<float> x = random_normal(20000, 4, group.rank());
        const std::string what = "threads=" + std::to_string(threads) + (never_calls ? " absent rank" : " failing lanes");
        if (group.rank() == faulty) {
          if (!never_calls) {
            FailingOnWorkers failing;
            expect_error_with([&] { shm->run_fused(x, bf16, {5, Direction::backward}, failing); },
                              {"tile hook failed on a worker thread"});
          }
        } else {
          const auto start = std::chrono::steady_clock::now();
          HalveHooks hooks;
          expect_error_with([&] { shm->run_fused(x, bf16, {5, Direction::backward}, hooks); },
                            {"backward site 5", "timed out", faulty_rank, "push"});
          const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          EXPECT_LT(waited, 30.0) << what;
        }
        const auto start = std::chrono::steady_clock::now();
        shm.reset();  // stops and joins the workers
        const double destroyed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_LT(destroyed, 1.0) << what << ": destroying the engine took " << destroyed << " s";
        group.barrier();  // the faulty rank waits here until the others gave up
        ws.reset();
      }
  });
}

TEST(ShmPipelinedReduce, ARankCallingWithAnotherLengthIsAnErrorNamingIt) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto shm = make_shm(group, small_geometry(), 20.0);
    ASSERT_NE(shm, nullptr);
    Bf16Codec bf16;
    const size_t n = group.rank() == 0 ? 1000 : 1024;
    std::vector<float> x = random_normal(n, 2, group.rank());
    expect_error_with([&] { shm->run(x, bf16, {1, Direction::forward}); },
                      {"forward site 1", "called with", "same length"});
    group.barrier();
  });
}

TEST(ShmWorkspace, OneWorkspacePerGroupAndGeometry) {
  on_group(echo::testing::world_size(), [&](const dist::Communicator& group) {
    auto a = ShmWorkspace::for_group(group, small_geometry());
    auto b = ShmWorkspace::for_group(group, small_geometry());
    auto c = ShmWorkspace::for_group(group, P2pGeometry{});
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a, b) << "engines of one group share the flags and the call counter";
    EXPECT_NE(a, c);
    // Every rank reaches every peer's region: the address table points at distinct regions.
    for (int p = 1; p < group.size(); ++p) EXPECT_NE(a->table().region(p), a->table().region(p - 1));
  });
}

}  // namespace
}  // namespace echo::comm
