// The two-phase all-reduce over MPI (exact and Echo QAR), run with 2 and 4 ranks, and on
// sub-communicators of 1 and 3 ranks. References are computed locally from every rank's
// regenerated contribution.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "../support/mpi_util.h"
#include "../support/test_data.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/echo/quantize.h"
#include "comm/exact_all_reduce.h"
#include "comm/segments.h"
#include "core/half.h"
#include "dist/communicator.h"

namespace echo::comm {
namespace {

using echo::testing::identical_on_all_ranks;
using echo::testing::on_group;
using echo::testing::random_normal;

// Communicators of every size this run can form: the world, and the first 1 and 3 ranks.
std::vector<int> group_sizes() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<int> sizes = {world, 1};
  if (world >= 4) sizes.push_back(3);
  return sizes;
}

std::vector<std::vector<float>> contributions(int num_ranks, size_t n, uint64_t seed, float mean = 0.3f) {
  std::vector<std::vector<float>> xs;
  for (int r = 0; r < num_ranks; ++r) xs.push_back(random_normal(n, seed, r, mean, 1.0f + 0.25f * r));
  return xs;
}

const size_t kLengths[] = {1, 2, 127, 129, 1000, 4096, 12345};

TEST(ExactAllReduce, Bf16EqualsTheRoundedRankOrderSumBitwise) {
  for (int size : group_sizes()) {
    on_group(size, [&](const dist::Communicator& comm) {
      ExactAllReduce ar(comm, ExactPrecision::bf16);
      for (size_t n : kLengths) {
        const auto xs = contributions(comm.size(), n, 11 + n);
        std::vector<float> y = xs[comm.rank()];
        ar.all_reduce(y, {0, Direction::forward});
        // Reference: owner o starts from its own bf16 value and adds the others in rank order.
        const auto segs = make_segments(n, comm.size(), Bf16Codec().granularity());
        for (int o = 0; o < comm.size(); ++o)
          for (size_t i = segs[o].begin; i < segs[o].begin + segs[o].size; ++i) {
            float acc = round_to_bf16(xs[o][i]);
            for (int j = 0; j < comm.size(); ++j)
              if (j != o) acc += round_to_bf16(xs[j][i]);
            ASSERT_EQ(float_bits(round_to_bf16(acc)), float_bits(y[i])) << "P=" << comm.size() << " n=" << n << " i=" << i;
          }
        EXPECT_TRUE(identical_on_all_ranks(y, comm));
      }
    });
  }
}

TEST(ExactAllReduce, Fp32MatchesTheDoubleSum) {
  for (int size : group_sizes()) {
    on_group(size, [&](const dist::Communicator& comm) {
      ExactAllReduce ar(comm, ExactPrecision::fp32);
      for (size_t n : kLengths) {
        const auto xs = contributions(comm.size(), n, 23 + n);
        std::vector<float> y = xs[comm.rank()];
        ar.all_reduce(y, {1, Direction::backward});
        for (size_t i = 0; i < n; ++i) {
          double exact = 0, mag = 0;
          for (const auto& x : xs) exact += x[i], mag += std::fabs(x[i]);
          ASSERT_NEAR(y[i], exact, 4 * comm.size() * 1.2e-7 * mag) << "i=" << i;
        }
        EXPECT_TRUE(identical_on_all_ranks(y, comm));
      }
    });
  }
}

// The bound implied by two quantizations: each non-owned contribution and the owner's sum
// are quantized once, each with an error of at most half its group's step s. The step is
// read from the documented wire layout (codes, then the fp16 scale of each group).
double group_step(const float* v, size_t len, const QuantSpec& spec) {
  std::vector<uint8_t> wire(wire_bytes(len, spec));
  quantize(v, len, spec, wire.data());
  uint16_t scale_bits;
  std::memcpy(&scale_bits, wire.data() + code_bytes(len, spec), sizeof scale_bits);
  return half_bits_to_float(scale_bits);
}

void check_qar_error_bound(QuantPolicy policy, int bits) {
  for (int size : group_sizes()) {
    on_group(size, [&](const dist::Communicator& comm) {
      EchoOptions opt;
      opt.quant = {policy, bits, 128};
      opt.compensate = false;
      EchoAllReduce ar(comm, opt);
      const int P = comm.size();
      for (size_t n : kLengths) {
        const auto xs = contributions(P, n, 101 + n + bits);
        std::vector<float> y = xs[comm.rank()];
        ar.begin_pass(Direction::forward);
        ar.all_reduce(y, {0, Direction::forward});
        EXPECT_TRUE(identical_on_all_ranks(y, comm)) << "P=" << P << " n=" << n;
        const auto segs = make_segments(n, P, 128);
        for (int o = 0; o < P; ++o)
          for (size_t g0 = segs[o].begin; g0 < segs[o].begin + segs[o].size; g0 += 128) {
            const size_t len = std::min<size_t>(128, segs[o].begin + segs[o].size - g0);
            // The owner quantizes its fp32 sum of its own values and the others' dequantized
            // copies; that sum's step bounds the second quantization.
            std::vector<float> owner_sum(xs[o].begin() + g0, xs[o].begin() + g0 + len);
            std::vector<uint8_t> wire(wire_bytes(len, opt.quant));
            double bound = 0;
            for (int j = 0; j < P; ++j) {
              if (j == o) continue;
              bound += 0.5 * group_step(&xs[j][g0], len, opt.quant);
              quantize(&xs[j][g0], len, opt.quant, wire.data());
              dequantize_add(wire.data(), len, opt.quant, owner_sum.data());
            }
            bound = 1.0001 * (bound + 0.5 * group_step(owner_sum.data(), len, opt.quant)) + 1e-6;
            for (size_t i = 0; i < len; ++i) {
              double exact = 0;
              for (int j = 0; j < P; ++j) exact += xs[j][g0 + i];
              ASSERT_LE(std::fabs(y[g0 + i] - exact), bound) << "P=" << P << " n=" << n << " element " << g0 + i;
            }
          }
      }
    });
  }
}

TEST(EchoQar, ZeroAware4BitWithinTwoQuantizations) { check_qar_error_bound(QuantPolicy::asym_zero_aware, 4); }
TEST(EchoQar, ZeroAware8BitWithinTwoQuantizations) { check_qar_error_bound(QuantPolicy::asym_zero_aware, 8); }
TEST(EchoQar, Symmetric4BitWithinTwoQuantizations) { check_qar_error_bound(QuantPolicy::symmetric, 4); }

TEST(EchoQar, EqualsASingleProcessReplayOfTheAlgorithmBitwise) {
  // Replays QAR with the quantizer alone: the owner adds the dequantized copies of the other
  // ranks in rank order to its own unquantized segment, quantizes the sum once, and every rank
  // decodes that. The MPI result must match bit for bit, for every policy and width.
  for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_naive, QuantPolicy::asym_zero_aware}) {
    for (int bits : {4, 8}) {
      on_group(group_sizes()[0], [&](const dist::Communicator& comm) {
        const QuantSpec spec{policy, bits, 64};
        EchoOptions opt;
        opt.quant = spec;
        opt.compensate = false;
        EchoAllReduce ar(comm, opt);
        const int P = comm.size();
        const size_t n = 1000;
        const auto xs = contributions(P, n, 7 * bits + static_cast<int>(policy));
        std::vector<float> y = xs[comm.rank()];
        ar.begin_pass(Direction::forward);
        ar.all_reduce(y, {0, Direction::forward});
        const auto segs = make_segments(n, P, 64);
        for (int o = 0; o < P; ++o) {
          const size_t b = segs[o].begin, len = segs[o].size;
          if (len == 0) continue;
          std::vector<float> acc(xs[o].begin() + b, xs[o].begin() + b + len), out(len);
          std::vector<uint8_t> wire(wire_bytes(len, spec));
          for (int j = 0; j < P; ++j) {
            if (j == o) continue;
            quantize(xs[j].data() + b, len, spec, wire.data());
            dequantize_add(wire.data(), len, spec, acc.data());
          }
          quantize(acc.data(), len, spec, wire.data());
          dequantize(wire.data(), len, spec, out.data());
          for (size_t i = 0; i < len; ++i) ASSERT_EQ(float_bits(out[i]), float_bits(y[b + i])) << "element " << b + i;
        }
      });
    }
  }
}

TEST(EchoQar, WireBytesFor4BitGroups128AreAtMost027OfThe16BitAllReduce) {
  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  EchoOptions opt;
  opt.quant = {QuantPolicy::asym_zero_aware, 4, 128};
  EchoAllReduce echo(world, opt);
  ExactAllReduce exact(world, ExactPrecision::bf16);
  for (size_t n : {size_t{1} << 20, size_t{3} << 20}) {
    const double ratio = static_cast<double>(echo.wire_bytes_per_rank(n, {0, Direction::forward})) /
                         exact.wire_bytes_per_rank(n, {0, Direction::forward});
    EXPECT_LE(ratio, 0.27) << n;
    EXPECT_NEAR(ratio, 68.0 / 256.0, 1e-3) << n;
  }
}

TEST(EchoQar, NonFiniteInputOnOneRankIsReportedWithTheSiteOnEveryRank) {
  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  for (Direction dir : {Direction::forward, Direction::backward}) {
    for (float bad : {std::nanf(""), INFINITY}) {
      EchoOptions opt;
      EchoAllReduce ar(world, opt);
      ar.begin_pass(dir);
      auto x = random_normal(1000, 5, world.rank());
      ar.all_reduce(x, {0, dir});  // a clean site first: the fault is at site 1
      x = random_normal(1000, 6, world.rank());
      if (world.rank() == world.size() - 1) x[777] = bad;
      try {
        ar.all_reduce(x, {1, dir});
        ADD_FAILURE() << "no error for a non-finite contribution";
      } catch (const Error& e) {
        const std::string site = std::string(to_string(dir)) + " site 1";
        EXPECT_NE(std::string(e.what()).find(site), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace echo::comm
