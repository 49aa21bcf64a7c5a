// Vocab-parallel cross-entropy over real MPI ranks: with make_mpi_reducer on MPI_COMM_WORLD the
// sharded loss, lse and dlogits equal the single-shard result on every rank (run with 2 and 4 ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "ops_test_util.h"

namespace echo::cpu {
namespace {

using testing::random_ints;
using testing::random_vec;

constexpr uint64_t kSeed = 4242;
constexpr int32_t kIgnore = -100;
constexpr double kTol = 1e-12;

struct Split {
  int64_t begin, local;
};

// Even split when vocab divides; otherwise rank r takes one extra column while r < vocab % size.
Split split_vocab(int64_t vocab, int rank, int size) {
  const int64_t base = vocab / size, extra = vocab % size;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

void check_against_single_shard(int64_t tokens, int64_t vocab, std::vector<int32_t> targets, double dloss,
                                const std::string& what) {
  const auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  // Every rank builds the same full logits; the reference is the single-shard op on them.
  const auto logits = random_vec(tokens * vocab, kSeed, static_cast<uint64_t>(vocab), 3.0);
  const int64_t count = count_targets(targets.data(), tokens, kIgnore);
  std::vector<double> ref_lse(tokens), ref_dlogits(tokens * vocab);
  const double ref_loss = cross_entropy_forward<double>(logits.data(), targets.data(), tokens, 0, vocab, kIgnore,
                                                        make_local_reducer(), ref_lse.data());
  cross_entropy_backward<double>(logits.data(), targets.data(), ref_lse.data(), tokens, 0, vocab, kIgnore, count, dloss,
                                 ref_dlogits.data());

  const Split sp = split_vocab(vocab, world.rank(), world.size());
  std::vector<double> shard(tokens * sp.local), dshard(tokens * sp.local, 3.0), lse(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < sp.local; ++j) shard[t * sp.local + j] = logits[t * vocab + sp.begin + j];
  const TpReducer reducer = make_mpi_reducer(world);
  const double loss = cross_entropy_forward<double>(shard.data(), targets.data(), tokens, sp.begin, sp.local, kIgnore,
                                                    reducer, lse.data());
  cross_entropy_backward<double>(shard.data(), targets.data(), lse.data(), tokens, sp.begin, sp.local, kIgnore, count,
                                 dloss, dshard.data());

  const std::string where = what + " on rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size());
  EXPECT_NEAR(loss, ref_loss, kTol * std::max(1.0, std::abs(ref_loss))) << where;
  for (int64_t t = 0; t < tokens; ++t) EXPECT_NEAR(lse[t], ref_lse[t], kTol * std::abs(ref_lse[t])) << where;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < sp.local; ++j)
      EXPECT_NEAR(dshard[t * sp.local + j], ref_dlogits[t * vocab + sp.begin + j], kTol)
          << where << ", token " << t << ", column " << sp.begin + j;

  // Every rank returns the very same loss.
  double lo = loss, hi = loss;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << where;
}

TEST(CrossEntropyMpiTest, ShardedEqualsSingleShard) {
  const int64_t tokens = 9, vocab = 48;
  auto targets = random_ints(tokens, kSeed, 1, 0, vocab - 1);
  targets[0] = 0;
  targets[1] = vocab - 1;
  targets[4] = kIgnore;
  check_against_single_shard(tokens, vocab, targets, 1.0, "vocab 48");
}

TEST(CrossEntropyMpiTest, UnevenShardsAndScaledLoss) {
  const int64_t tokens = 5, vocab = 23;  // 23 splits unevenly over 2 and 4 ranks
  auto targets = random_ints(tokens, kSeed, 2, 0, vocab - 1);
  targets[2] = kIgnore;
  check_against_single_shard(tokens, vocab, targets, 0.25, "vocab 23");
}

TEST(CrossEntropyMpiTest, AllIgnoredGivesZero) {
  const int64_t tokens = 4, vocab = 16;
  check_against_single_shard(tokens, vocab, std::vector<int32_t>(tokens, kIgnore), 1.0, "all ignored");
}

TEST(CrossEntropyMpiTest, TargetOutsideTheVocabThrowsOnEveryRank) {
  const auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  const int64_t tokens = 2, vocab = 8;
  const Split sp = split_vocab(vocab, world.rank(), world.size());
  const auto logits = random_vec(tokens * sp.local, kSeed, 99);
  const std::vector<int32_t> targets = {3, static_cast<int32_t>(vocab)};  // id 8: no shard owns it
  std::vector<double> lse(tokens);
  EXPECT_THROW(cross_entropy_forward<double>(logits.data(), targets.data(), tokens, sp.begin, sp.local, kIgnore,
                                             make_mpi_reducer(world), lse.data()),
               echo::Error);
}

}  // namespace
}  // namespace echo::cpu
