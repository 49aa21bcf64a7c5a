// cuda::cross_entropy_forward / cross_entropy_backward against the CPU reference
// (cpu::cross_entropy_*<double> on the same logits): the loss within 1e-6 relative, lse within 1e-5,
// dlogits within 1e-5 (f32) / 1e-2 (bf16) max-abs-normalized; ignored targets; vocab-parallel
// shards on two host threads joined by an in-process TpReducer (the same loss bits on both ranks);
// a counted target no shard owns is an error on every rank. cuda::cross_entropy_accumulate (the
// backend's op: the loss added to a device scalar, no wait at tp = 1) against the same reference,
// and its device-reducer path (tp > 1 over NCCL; here staged through the threads' reducer) against
// the host path.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <exception>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../support/gpu_test.h"
#include "../support/staged_device_reduce.h"
#include "backend/ops.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

constexpr int32_t kIgnore = -100;

// The TpReducer of `size` host threads, one per simulated TP rank: each rank's values meet at a
// barrier and every rank combines them in rank order, so all get the same bits (like the MPI one).
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), barrier_(size), inputs_(size) {}

  backend::TpReducer reducer(int rank) {
    return {[this, rank](std::span<double> v) { combine(rank, v, true); },
            [this, rank](std::span<double> v) { combine(rank, v, false); }};
  }

  // A rank that failed leaves the group, so the others cannot wait for it forever (their next
  // reduction then fails instead of hanging).
  void leave(int rank) {
    inputs_[rank].clear();
    barrier_.arrive_and_drop();
  }

 private:
  void combine(int rank, std::span<double> v, bool max) {
    inputs_[rank].assign(v.begin(), v.end());
    barrier_.arrive_and_wait();
    bool complete = true;
    for (int k = 0; k < size_; ++k) complete &= inputs_[k].size() == v.size();
    for (size_t i = 0; complete && i < v.size(); ++i) {
      double r = inputs_[0][i];
      for (int k = 1; k < size_; ++k) r = max ? std::max(r, inputs_[k][i]) : r + inputs_[k][i];
      v[i] = r;
    }
    barrier_.arrive_and_wait();  // no rank overwrites its input while another still reads it
    if (!complete) throw std::runtime_error("ThreadGroup: a rank left the group");
  }

  int size_;
  std::barrier<> barrier_;
  std::vector<std::vector<double>> inputs_;
};

// Targets in [0, vocab) with every 5th ignored.
std::vector<int32_t> random_targets(int64_t tokens, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(tokens);
  for (int64_t i = 0; i < tokens; ++i) t[i] = i % 5 == 3 ? kIgnore : dist(rng);
  return t;
}

// Columns [begin, begin + width) of a (rows, cols) row-major matrix.
template <class T>
std::vector<T> columns(const std::vector<T>& m, int64_t rows, int64_t cols, int64_t begin, int64_t width) {
  std::vector<T> out(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(m.begin() + r * cols + begin, m.begin() + r * cols + begin + width, out.begin() + r * width);
  return out;
}

struct Reference {
  double loss;
  int64_t count;
  std::vector<double> lse, dlogits;
};

Reference reference(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t tokens,
                    int64_t vocab, int64_t count_extra, double dloss) {
  Reference r;
  const std::vector<double> ld = to_double(logits);
  r.lse.resize(tokens);
  r.loss = cpu::cross_entropy_forward<double>(ld.data(), targets.data(), tokens, 0, vocab, kIgnore,
                                              backend::make_local_reducer(), r.lse.data());
  r.count = cpu::count_targets(targets.data(), tokens, kIgnore) + count_extra;
  r.dlogits.resize(tokens * vocab);
  cpu::cross_entropy_backward<double>(ld.data(), targets.data(), r.lse.data(), tokens, 0, vocab, kIgnore, r.count,
                                      dloss, r.dlogits.data());
  return r;
}

::testing::AssertionResult loss_close(double got, double want) {
  const double rel = std::fabs(got - want) / std::max(std::fabs(want), 1e-300);
  if (rel <= 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "loss " << got << " vs " << want << ": relative error " << rel;
}

TEST(CrossEntropyCuda, MatchesCpuReference) {
  ECHO_REQUIRE_DEVICE();
  struct Shape {
    int64_t tokens, vocab;
  };
  const Shape shapes[] = {{1, 5}, {7, 33}, {64, 1000}, {200, 3001}, {33, 50000}, {3, 151936}};
  uint32_t seed = 500;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(dtype_name(dtype) + " tokens " + std::to_string(s.tokens) + " vocab " + std::to_string(s.vocab));
      const std::vector<float> logits = rounded_to(random_floats(s.tokens * s.vocab, seed++, 3.0f), dtype);
      std::vector<int32_t> targets = random_targets(s.tokens, s.vocab, seed++);
      if (s.tokens == 1) targets[0] = static_cast<int32_t>(s.vocab - 1);
      const double dloss = 0.75;
      const int64_t count_extra = s.tokens > 10 ? 5 : 0;  // a mean over more micro-batches than this one
      const Reference ref = reference(logits, targets, s.tokens, s.vocab, count_extra, dloss);

      Tensor d_logits = device_tensor(logits, {s.tokens, s.vocab}, dtype);
      Tensor d_targets = device_i32(targets, {s.tokens});
      Tensor d_lse = Tensor::empty({s.tokens}, DType::f32, Device::cuda);
      const double loss =
          cuda::cross_entropy_forward(d_logits, d_targets, 0, kIgnore, backend::make_local_reducer(), d_lse, nullptr);
      EXPECT_TRUE(loss_close(loss, ref.loss));
      EXPECT_TRUE(close_normalized(host_floats(d_lse), ref.lse, 1e-5));

      Tensor d_dlogits = Tensor::empty({s.tokens, s.vocab}, dtype, Device::cuda);
      cuda::cross_entropy_backward(d_logits, d_targets, d_lse, 0, kIgnore, ref.count, dloss, d_dlogits, nullptr);
      const std::vector<float> dlogits = host_floats(d_dlogits);
      EXPECT_TRUE(close_normalized(dlogits, ref.dlogits, tolerance(dtype)));
      for (int64_t t = 0; t < s.tokens; ++t) {
        if (targets[t] != kIgnore) continue;
        for (int64_t j = 0; j < s.vocab; ++j) ASSERT_EQ(float_bits(dlogits[t * s.vocab + j]), 0u) << t << ", " << j;
      }

      // Determinism: the same loss bits again.
      EXPECT_EQ(loss, cuda::cross_entropy_forward(d_logits, d_targets, 0, kIgnore, backend::make_local_reducer(), d_lse,
                                                  nullptr));

      // The device-side path: two micro-batches of this batch, each / 2, add up to the loss; the same
      // lse; the same bits on a second run (a fixed reduction order).
      double sums[2] = {0, 0};
      for (double& sum : sums) {
        Tensor d_acc = Tensor::zeros({1}, DType::f64, Device::cuda);
        Tensor d_lse2 = Tensor::empty({s.tokens}, DType::f32, Device::cuda);
        for (int micro = 0; micro < 2; ++micro)
          cuda::cross_entropy_accumulate(d_logits, d_targets, 0, kIgnore, backend::make_local_reducer(), d_lse2, 2.0,
                                         d_acc, nullptr);
        sum = d_acc.to(Device::cpu).to_vector<double>()[0];
        EXPECT_TRUE(close_normalized(host_floats(d_lse2), ref.lse, 1e-5));
      }
      EXPECT_TRUE(loss_close(sums[0], ref.loss)) << sums[0] << " vs " << ref.loss;
      EXPECT_EQ(sums[0], sums[1]);
    }
  }
}

TEST(CrossEntropyCuda, NoCountedTargetGivesZeroLossAndZeroGradient) {
  ECHO_REQUIRE_DEVICE();
  const int64_t tokens = 4, vocab = 17;
  Tensor d_logits = device_tensor(random_floats(tokens * vocab, 7), {tokens, vocab}, DType::f32);
  Tensor d_targets = device_i32(std::vector<int32_t>(tokens, kIgnore), {tokens});
  Tensor d_lse = Tensor::empty({tokens}, DType::f32, Device::cuda);
  EXPECT_EQ(cuda::cross_entropy_forward(d_logits, d_targets, 0, kIgnore, backend::make_local_reducer(), d_lse, nullptr),
            0.0);
  Tensor d_dlogits = Tensor::empty({tokens, vocab}, DType::f32, Device::cuda);
  cuda::cross_entropy_backward(d_logits, d_targets, d_lse, 0, kIgnore, 0, 1.0, d_dlogits, nullptr);
  for (float v : host_floats(d_dlogits)) ASSERT_EQ(float_bits(v), 0u);
}

// Two ranks, each holding half the vocabulary, on two host threads: both return the same loss bits,
// equal to the full-vocabulary reference; each shard's lse and dlogits match the reference's.
TEST(CrossEntropyCuda, VocabParallelShardsMatchTheFullVocabulary) {
  ECHO_REQUIRE_DEVICE();
  const int64_t tokens = 97, vocab = 5003, split = 2600;
  uint32_t seed = 600;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> logits = rounded_to(random_floats(tokens * vocab, seed++, 3.0f), dtype);
    const std::vector<int32_t> targets = random_targets(tokens, vocab, seed++);
    const double dloss = 1.25;
    const Reference ref = reference(logits, targets, tokens, vocab, 0, dloss);

    const int64_t begins[2] = {0, split}, widths[2] = {split, vocab - split};
    ThreadGroup group(2);
    double losses[2] = {0, 0};
    std::vector<float> lse[2], dlogits[2];
    std::exception_ptr errors[2];
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          Tensor d_logits =
              device_tensor(columns(logits, tokens, vocab, begins[rank], widths[rank]), {tokens, widths[rank]}, dtype);
          Tensor d_targets = device_i32(targets, {tokens});
          Tensor d_lse = Tensor::empty({tokens}, DType::f32, Device::cuda);
          losses[rank] = cuda::cross_entropy_forward(d_logits, d_targets, begins[rank], kIgnore, group.reducer(rank),
                                                     d_lse, nullptr);
          // Across ranks the accumulating op takes the host path: loss / divisor, those bits exactly.
          Tensor d_acc = Tensor::zeros({1}, DType::f64, Device::cuda);
          cuda::cross_entropy_accumulate(d_logits, d_targets, begins[rank], kIgnore, group.reducer(rank), d_lse, 4.0,
                                         d_acc, nullptr);
          EXPECT_EQ(d_acc.to(Device::cpu).to_vector<double>()[0], losses[rank] / 4.0);
          Tensor d_dlogits = Tensor::empty({tokens, widths[rank]}, dtype, Device::cuda);
          cuda::cross_entropy_backward(d_logits, d_targets, d_lse, begins[rank], kIgnore, ref.count, dloss, d_dlogits,
                                       nullptr);
          lse[rank] = host_floats(d_lse);
          dlogits[rank] = host_floats(d_dlogits);
        } catch (...) {
          errors[rank] = std::current_exception();
          group.leave(rank);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int rank = 0; rank < 2; ++rank)
      if (errors[rank]) std::rethrow_exception(errors[rank]);
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_TRUE(loss_close(losses[0], ref.loss));
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(close_normalized(lse[rank], ref.lse, 1e-5));
      EXPECT_TRUE(close_normalized(dlogits[rank], columns(ref.dlogits, tokens, vocab, begins[rank], widths[rank]),
                                   tolerance(dtype)));
    }
  }
}

// The device-reducer path of cross_entropy_accumulate (what tp > 1 takes between distinct GPUs)
// against the host path on the same shards: lse within 1e-7, the loss within 1e-12 relative (the
// rescale factor is the device's exp rather than the host's), the same loss on both ranks; a
// counted target no shard owns makes the accumulated loss NaN on both.
TEST(CrossEntropyCuda, DeviceReducerPathMatchesTheHostPath) {
  ECHO_REQUIRE_DEVICE();
  const int64_t tokens = 53, vocab = 3001, split = 1400;
  uint32_t seed = 700;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool unowned : {false, true}) {
      SCOPED_TRACE(dtype_name(dtype) + (unowned ? " with an unowned target" : ""));
      const std::vector<float> logits = rounded_to(random_floats(tokens * vocab, seed++, 3.0f), dtype);
      std::vector<int32_t> targets = random_targets(tokens, vocab, seed++);
      if (unowned) targets[7] = static_cast<int32_t>(vocab + 2);
      const int64_t begins[2] = {0, split}, widths[2] = {split, vocab - split};
      ThreadGroup host_group(2), device_group(2);
      double host_loss[2] = {0, 0}, device_acc[2] = {0, 0};
      std::vector<float> host_lse[2], device_lse[2];
      std::exception_ptr errors[2];
      std::vector<std::thread> threads;
      for (int rank = 0; rank < 2; ++rank) {
        threads.emplace_back([&, rank] {
          try {
            Tensor d_logits = device_tensor(columns(logits, tokens, vocab, begins[rank], widths[rank]),
                                            {tokens, widths[rank]}, dtype);
            Tensor d_targets = device_i32(targets, {tokens});
            Tensor d_lse = Tensor::empty({tokens}, DType::f32, Device::cuda);
            if (!unowned) {
              host_loss[rank] = cuda::cross_entropy_forward(d_logits, d_targets, begins[rank], kIgnore,
                                                            host_group.reducer(rank), d_lse, nullptr);
              host_lse[rank] = host_floats(d_lse);
            }
            const backend::TpReducer device = with_staged_device(device_group.reducer(rank));
            Tensor d_acc = Tensor::zeros({1}, DType::f64, Device::cuda);
            Tensor d_lse2 = Tensor::empty({tokens}, DType::f32, Device::cuda);
            cuda::cross_entropy_accumulate(d_logits, d_targets, begins[rank], kIgnore, device, d_lse2, 4.0, d_acc,
                                           nullptr);
            device_acc[rank] = d_acc.to(Device::cpu).to_vector<double>()[0];
            device_lse[rank] = host_floats(d_lse2);
          } catch (...) {
            errors[rank] = std::current_exception();
            host_group.leave(rank);
            device_group.leave(rank);
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (int rank = 0; rank < 2; ++rank)
        if (errors[rank]) std::rethrow_exception(errors[rank]);
      EXPECT_EQ(std::memcmp(&device_acc[0], &device_acc[1], sizeof(double)), 0) << device_acc[0] << " vs "
                                                                               << device_acc[1];
      if (unowned) {
        EXPECT_TRUE(std::isnan(device_acc[0])) << device_acc[0];
        continue;
      }
      EXPECT_GT(host_loss[0], 1.0);  // a real loss: log(3001) is about 8
      EXPECT_LE(std::fabs(device_acc[0] - host_loss[0] / 4.0), 1e-12 * host_loss[0]) << device_acc[0] << " vs "
                                                                                       << host_loss[0] / 4.0;
      for (int rank = 0; rank < 2; ++rank) EXPECT_TRUE(close_normalized(device_lse[rank], to_double(host_lse[rank]), 1e-7));
    }
  }
}

TEST(CrossEntropyCuda, UnownedTargetIsAnErrorOnEveryRank) {
  ECHO_REQUIRE_DEVICE();
  const int64_t tokens = 6, vocab = 40, split = 25;
  const std::vector<float> logits = random_floats(tokens * vocab, 9);
  // Single shard: a target beyond the vocabulary, and a negative one that is not ignore_index.
  for (int32_t bad : {static_cast<int32_t>(vocab + 3), -5}) {
    std::vector<int32_t> targets = random_targets(tokens, vocab, 10);
    targets[2] = bad;
    Tensor d_logits = device_tensor(logits, {tokens, vocab}, DType::f32);
    Tensor d_targets = device_i32(targets, {tokens});
    Tensor d_lse = Tensor::empty({tokens}, DType::f32, Device::cuda);
    EXPECT_THROW(
        cuda::cross_entropy_forward(d_logits, d_targets, 0, kIgnore, backend::make_local_reducer(), d_lse, nullptr),
        Error)
        << bad;
  }
  // Two shards: both ranks reach both reductions, then both throw.
  std::vector<int32_t> targets = random_targets(tokens, vocab, 11);
  targets[4] = static_cast<int32_t>(vocab);
  const int64_t begins[2] = {0, split}, widths[2] = {split, vocab - split};
  ThreadGroup group(2);
  bool threw[2] = {false, false};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        Tensor d_logits = device_tensor(columns(logits, tokens, vocab, begins[rank], widths[rank]),
                                        {tokens, widths[rank]}, DType::f32);
        Tensor d_targets = device_i32(targets, {tokens});
        Tensor d_lse = Tensor::empty({tokens}, DType::f32, Device::cuda);
        cuda::cross_entropy_forward(d_logits, d_targets, begins[rank], kIgnore, group.reducer(rank), d_lse, nullptr);
      } catch (const Error&) {
        threw[rank] = true;
      } catch (...) {
        group.leave(rank);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(threw[0]);
  EXPECT_TRUE(threw[1]);
}

TEST(CrossEntropyCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor logits = device_tensor(random_floats(12, 1), {3, 4}, DType::f32);
  Tensor targets = device_i32({0, 1, 2}, {3});
  Tensor targets_short = device_i32({0, 1}, {2});
  Tensor lse = Tensor::empty({3}, DType::f32, Device::cuda);
  Tensor lse_bf16 = Tensor::empty({3}, DType::bf16, Device::cuda);
  Tensor dlogits_bf16 = Tensor::empty({3, 4}, DType::bf16, Device::cuda);
  const auto local = backend::make_local_reducer();
  EXPECT_THROW(cuda::cross_entropy_forward(logits, targets_short, 0, kIgnore, local, lse, nullptr), Error);
  EXPECT_THROW(cuda::cross_entropy_forward(logits, targets, 0, kIgnore, local, lse_bf16, nullptr), Error);
  EXPECT_THROW(cuda::cross_entropy_forward(logits, targets, 0, kIgnore, backend::TpReducer{}, lse, nullptr), Error);
  EXPECT_THROW(cuda::cross_entropy_backward(logits, targets, lse, 0, kIgnore, 3, 1.0, dlogits_bf16, nullptr), Error);
  EXPECT_THROW(cuda::cross_entropy_backward(logits, targets, lse, 0, kIgnore, -1, 1.0, logits, nullptr), Error);
}

}  // namespace
}  // namespace echo
