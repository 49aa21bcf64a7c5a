// The data loader: packing with EOS, one epoch covering the stream once in permuted order, targets
// shifted by one, determinism from the seed, the DP split of a global batch, TP replicas, epoch
// wrap-around, the construction errors, and a .bin rewritten in place under the loader.
#include "data/data_loader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <set>

#include "data_test_util.h"

namespace echo::data {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::random_documents;
using testing::ScratchDir;
using testing::write_dataset;

constexpr int32_t kEos = 0;  // document tokens are drawn from [1, 1000), so EOS is recognizable
constexpr int64_t kSeqLen = 16;

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<size_t> lengths = {0, 1, 150, 1};
    std::mt19937_64 gen(3);
    for (int i = 0; i < 60; ++i) lengths.push_back(gen() % 40);
    docs_ = random_documents(lengths, 1, 1000, 5);
    write_dataset(dir_.path("train"), docs_);
    ds_ = std::make_unique<IndexedDataset>(IndexedDataset::open(dir_.path("train")));
    for (const auto& d : docs_) {
      stream_.insert(stream_.end(), d.begin(), d.end());
      stream_.push_back(kEos);
    }
  }

  LoaderOptions options(uint64_t seed, int dp_rank = 0, int dp_size = 1) const {
    return LoaderOptions{.seq_len = kSeqLen, .seed = seed, .eos_id = kEos, .dp_rank = dp_rank, .dp_size = dp_size};
  }

  // The packed sample index k whose inputs are stream[k*L, k*L + L), found by content; the
  // stream's chunks are distinct (checked in PackedChunksAreDistinct), so the answer is unique.
  int64_t packed_index(const std::vector<int32_t>& tokens) const {
    for (size_t k = 0; (k + 1) * kSeqLen < stream_.size(); ++k)
      if (std::equal(tokens.begin(), tokens.end(), stream_.begin() + k * kSeqLen)) return static_cast<int64_t>(k);
    return -1;
  }

  std::vector<int64_t> epoch_order(const DataLoader& loader, uint64_t epoch) const {
    std::vector<int64_t> order;
    std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
    const uint64_t n = loader.samples_per_epoch();
    for (uint64_t i = 0; i < n; ++i) {
      loader.sample(epoch * n + i, tokens.data(), targets.data());
      order.push_back(packed_index(tokens));
    }
    return order;
  }

  ScratchDir dir_;
  std::vector<std::vector<int32_t>> docs_;
  std::unique_ptr<IndexedDataset> ds_;
  std::vector<int32_t> stream_;  // the expected packing: every document followed by EOS
};

TEST_F(DataLoaderTest, PackingInsertsEosAfterEveryDocument) {
  const DataLoader loader(*ds_, options(1));
  ASSERT_EQ(loader.stream_length(), ds_->num_tokens() + docs_.size());
  ASSERT_EQ(loader.stream_length(), stream_.size());
  std::vector<int32_t> got(stream_.size());
  loader.read_stream(0, got.size(), got.data());
  EXPECT_EQ(got, stream_);
  EXPECT_EQ(std::count(got.begin(), got.end(), kEos), static_cast<long>(docs_.size()));
  // Reads that start inside a document, on an EOS, and on an empty document.
  for (uint64_t pos : {0ul, 1ul, 2ul, 3ul, 77ul, 153ul, 154ul, stream_.size() - 5}) {
    std::vector<int32_t> part(5);
    loader.read_stream(pos, part.size(), part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), stream_.begin() + pos)) << "pos " << pos;
  }
  // (N + D - 1) / L samples: the last input token must have a target.
  EXPECT_EQ(loader.samples_per_epoch(), (stream_.size() - 1) / kSeqLen);
}

// Documents that already end in the EOS (echo_prep --append-eos) are packed as stored: the same
// stream, hence the same samples in the same order, as the loader appending it to bare documents,
// and not a second EOS after each.
TEST_F(DataLoaderTest, StoredEosIsNotAppendedAgain) {
  std::vector<std::vector<int32_t>> with_eos = docs_;
  for (auto& d : with_eos) d.push_back(kEos);
  write_dataset(dir_.path("stored"), with_eos);
  const IndexedDataset stored = IndexedDataset::open(dir_.path("stored"));
  LoaderOptions opt = options(4);
  opt.eos_stored = true;
  const DataLoader loader(stored, opt);
  ASSERT_EQ(loader.stream_length(), stream_.size());
  std::vector<int32_t> got(stream_.size());
  loader.read_stream(0, got.size(), got.data());
  EXPECT_EQ(got, stream_);
  const DataLoader appending(*ds_, options(4));
  ASSERT_EQ(loader.samples_per_epoch(), appending.samples_per_epoch());
  std::vector<int32_t> a(kSeqLen), at(kSeqLen), b(kSeqLen), bt(kSeqLen);
  for (uint64_t i = 0; i < 2 * loader.samples_per_epoch(); ++i) {
    loader.sample(i, a.data(), at.data());
    appending.sample(i, b.data(), bt.data());
    ASSERT_EQ(a, b) << "sample " << i;
    ASSERT_EQ(at, bt) << "sample " << i;
  }
  // Without eos_stored the same file gets two EOS in a row after every document.
  const DataLoader doubled(stored, options(4));
  EXPECT_EQ(doubled.stream_length(), stream_.size() + docs_.size());
}

TEST_F(DataLoaderTest, PackedChunksAreDistinct) {
  std::set<std::vector<int32_t>> chunks;
  const uint64_t n = (stream_.size() - 1) / kSeqLen;
  for (uint64_t k = 0; k < n; ++k) chunks.emplace(stream_.begin() + k * kSeqLen, stream_.begin() + (k + 1) * kSeqLen);
  EXPECT_EQ(chunks.size(), n) << "the fixture's stream must have distinct chunks for packed_index()";
}

TEST_F(DataLoaderTest, EpochCoversTheStreamOnceInPermutedOrder) {
  const DataLoader loader(*ds_, options(42));
  const auto order = epoch_order(loader, 0);
  const int64_t n = static_cast<int64_t>(loader.samples_per_epoch());
  ASSERT_GT(n, 50);
  // Every packed sample exactly once: reassembled in packed order, the inputs are stream[0, n*L).
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < n; ++k) ASSERT_EQ(sorted[k], k) << "packed sample " << k << " missing or repeated";
  // ... and in a shuffled order: few fixed points, not sorted.
  int fixed = 0;
  for (int64_t i = 0; i < n; ++i) fixed += order[i] == i;
  EXPECT_LE(fixed, 6);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
}

TEST_F(DataLoaderTest, TargetsAreInputsShiftedByOne) {
  const DataLoader loader(*ds_, options(9));
  std::vector<int32_t> tokens(kSeqLen), targets(kSeqLen);
  for (uint64_t g = 0; g < loader.samples_per_epoch(); ++g) {
    loader.sample(g, tokens.data(), targets.data());
    const int64_t k = packed_index(tokens);
    ASSERT_GE(k, 0) << "sample " << g << " is not a chunk of the stream";
    for (int64_t j = 0; j < kSeqLen; ++j)
      ASSERT_EQ(targets[j], stream_[k * kSeqLen + j + 1]) << "sample " << g << " position " << j;
  }
}

TEST_F(DataLoaderTest, SameSeedSameSamplesDifferentSeedDifferentOrder) {
  const DataLoader a(*ds_, options(1234)), b(*ds_, options(1234)), c(*ds_, options(1235));
  std::vector<int32_t> ta(kSeqLen), ga(kSeqLen), tb(kSeqLen), gb(kSeqLen);
  for (uint64_t g = 0; g < 2 * a.samples_per_epoch(); ++g) {
    a.sample(g, ta.data(), ga.data());
    b.sample(g, tb.data(), gb.data());
    ASSERT_EQ(ta, tb) << "sample " << g;
    ASSERT_EQ(ga, gb) << "sample " << g;
  }
  const auto oa = epoch_order(a, 0), oc = epoch_order(c, 0);
  int same = 0;
  for (size_t i = 0; i < oa.size(); ++i) same += oa[i] == oc[i];
  EXPECT_LE(same, 6) << "seeds 1234 and 1235 should give unrelated orders";
}

TEST_F(DataLoaderTest, DpRanksAreDisjointAndCoverTheGlobalBatch) {
  constexpr int kDp = 3, kMicroBatch = 2, kNumMicro = 2, kSteps = 4;  // G = 12; 48 samples <= one epoch
  const DataLoader single(*ds_, options(77));
  ASSERT_GE(single.samples_per_epoch(), static_cast<uint64_t>(kSteps * kDp * kMicroBatch * kNumMicro));
  std::set<int64_t> seen;
  constexpr uint64_t kGlobal = kDp * kMicroBatch * kNumMicro;
  for (uint64_t step = 0; step < kSteps; ++step) {
    // The global batch in the order (rank, micro-batch, row) ...
    std::vector<int32_t> global_tokens, global_targets;
    for (int r = 0; r < kDp; ++r) {
      const DataLoader rank(*ds_, options(77, r, kDp));
      for (int m = 0; m < kNumMicro; ++m) {
        std::vector<int32_t> tokens, targets;
        rank.micro_batch(step * kGlobal, m, kMicroBatch, kNumMicro, tokens, targets);
        ASSERT_EQ(tokens.size(), static_cast<size_t>(kMicroBatch * kSeqLen));
        ASSERT_EQ(targets.size(), tokens.size());
        global_tokens.insert(global_tokens.end(), tokens.begin(), tokens.end());
        global_targets.insert(global_targets.end(), targets.begin(), targets.end());
        for (int row = 0; row < kMicroBatch; ++row) {
          const int64_t k = packed_index({tokens.begin() + row * kSeqLen, tokens.begin() + (row + 1) * kSeqLen});
          EXPECT_TRUE(seen.insert(k).second) << "packed sample " << k << " served twice (rank " << r << ")";
        }
      }
    }
    // ... is exactly the dp_size = 1 loader's batch with the same global size.
    std::vector<int32_t> tokens, targets;
    for (int m = 0; m < kDp * kNumMicro; ++m) {
      std::vector<int32_t> t, g;
      single.micro_batch(step * kGlobal, m, kMicroBatch, kDp * kNumMicro, t, g);
      tokens.insert(tokens.end(), t.begin(), t.end());
      targets.insert(targets.end(), g.begin(), g.end());
    }
    EXPECT_EQ(global_tokens, tokens) << "step " << step;
    EXPECT_EQ(global_targets, targets) << "step " << step;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kSteps * kDp * kMicroBatch * kNumMicro));
}

TEST_F(DataLoaderTest, TpRanksOfADpGroupGetTheSameBatch) {
  // World 4 = dp 2 x tp 2 (docs/design.md §3): dp_rank = rank / tp.
  constexpr int kTp = 2, kWorld = 4;
  std::vector<std::vector<int32_t>> batch(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    const DataLoader loader(*ds_, options(5, rank / kTp, kWorld / kTp));
    std::vector<int32_t> targets;
    loader.micro_batch(3 * 8, 1, 2, 2, batch[rank], targets);  // global batch 3 of 2 x 2 x dp 2
  }
  EXPECT_EQ(batch[0], batch[1]);
  EXPECT_EQ(batch[2], batch[3]);
  EXPECT_NE(batch[0], batch[2]);
}

TEST_F(DataLoaderTest, EpochsWrapWithANewPermutation) {
  const DataLoader loader(*ds_, options(100)), next_seed(*ds_, options(101));
  const auto e0 = epoch_order(loader, 0), e1 = epoch_order(loader, 1);
  std::vector<int64_t> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size(); ++k) ASSERT_EQ(sorted[k], static_cast<int64_t>(k));
  int same = 0;
  for (size_t i = 0; i < e0.size(); ++i) same += e0[i] == e1[i];
  EXPECT_LE(same, 6);
  EXPECT_EQ(e1, epoch_order(next_seed, 0)) << "epoch e is shuffled with seed + e";
  // A batch that straddles the epoch boundary reads both epochs.
  const uint64_t n = loader.samples_per_epoch();
  std::vector<int32_t> t(kSeqLen), g(kSeqLen);
  loader.sample(n - 1, t.data(), g.data());
  EXPECT_EQ(packed_index(t), e0.back());
  loader.sample(n, t.data(), g.data());
  EXPECT_EQ(packed_index(t), e1.front());
}

TEST_F(DataLoaderTest, Errors) {
  auto opt = options(1);
  opt.seq_len = 0;
  EXPECT_THAT(error_of([&] { DataLoader(*ds_, opt); }), HasSubstr("seq_len must be at least 1, got 0"));
  EXPECT_THAT(error_of([&] { DataLoader(*ds_, options(1, 2, 2)); }), HasSubstr("dp_rank 2 out of range [0, 2)"));
  const DataLoader loader(*ds_, options(1));
  std::vector<int32_t> t, g;
  EXPECT_THAT(error_of([&] { loader.micro_batch(0, 2, 4, 2, t, g); }), HasSubstr("micro-batch 2 out of range [0, 2)"));

  write_dataset(dir_.path("empty"), {});
  const IndexedDataset empty = IndexedDataset::open(dir_.path("empty"));
  EXPECT_THAT(error_of([&] { DataLoader(empty, options(1)); }),
              HasSubstr(dir_.path("empty") + ": empty dataset (0 documents)"));

  // 6 tokens in 2 documents -> stream of 8: one sample needs seq_len + 1 <= 8.
  write_dataset(dir_.path("tiny"), {{1, 2, 3}, {4, 5, 6}});
  const IndexedDataset tiny = IndexedDataset::open(dir_.path("tiny"));
  opt.seq_len = 8;
  EXPECT_THAT(error_of([&] { DataLoader(tiny, opt); }),
              HasSubstr(dir_.path("tiny") + ": too little data: 6 tokens in 2 documents pack (with EOS) into a "
                                            "stream of 8 tokens, fewer than one sample of seq_len + 1 = 9 tokens"));
  opt.seq_len = 7;
  opt.eos_id = 99;
  const DataLoader one(tiny, opt);
  ASSERT_EQ(one.samples_per_epoch(), 1u);
  std::vector<int32_t> tokens(7), targets(7);
  one.sample(5, tokens.data(), targets.data());  // any index: every epoch has the one sample
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 3, 99, 4, 5, 6}));
  EXPECT_EQ(targets, (std::vector<int32_t>{2, 3, 99, 4, 5, 6, 99}));
}

// A .bin copied over in place (cp keeps the inode; the mapping is MAP_SHARED, so the loader would
// read the new bytes) is refused at the next batch, naming the file and how it changed; so is a
// token id outside the vocabulary even when the rewrite kept the size and modification time
// (touch -d), since only a rewrite can bring one after check_token_range. Untouched, the same
// batches load.
TEST_F(DataLoaderTest, ABinRewrittenInPlaceIsRefusedAtTheNextBatch) {
  auto opt = options(1);
  opt.vocab_size = 1000;
  const DataLoader loader(*ds_, opt);
  std::vector<int32_t> tokens, targets;
  loader.micro_batch(0, 0, 2, 1, tokens, targets);
  const std::vector<int32_t> first = tokens;
  const std::string bin = dir_.path("train") + ".bin";
  struct stat before {};
  ASSERT_EQ(::stat(bin.c_str(), &before), 0);

  // Same size, one token out of range, then the old modification time back: only the id check sees it.
  std::vector<uint8_t> bytes = testing::read_bytes(bin);
  const int32_t bad = 4321;
  for (size_t at = 0; at + 4 <= bytes.size(); at += 4) std::memcpy(bytes.data() + at, &bad, 4);
  testing::write_bytes(bin, bytes);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, bin.c_str(), times, 0), 0);
  EXPECT_THAT(error_of([&] { loader.micro_batch(2, 0, 2, 1, tokens, targets); }),
              HasSubstr("dataset '" + dir_.path("train") + "': token id 4321 read from " + bin +
                        " lies outside [0, 'model.vocab_size' = 1000), though every token was checked when the run "
                        "opened it: the file changed under the run; the batches read since then may not be the data"));

  // A longer file with a new modification time: the change itself is named.
  bytes.resize(bytes.size() + 8, 1);
  testing::write_bytes(bin, bytes);
  const struct timespec later[2] = {{before.st_atim.tv_sec, 0}, {before.st_mtim.tv_sec + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, bin.c_str(), later, 0), 0);
  const std::string error = error_of([&] { loader.micro_batch(0, 0, 2, 1, tokens, targets); });
  EXPECT_THAT(error, HasSubstr("dataset '" + dir_.path("train") + "': " + bin + " changed while this run was reading "
                               "it (it was modified at "));
  EXPECT_THAT(error, HasSubstr(fmt::format(" UTC, and its size went from {} to {} bytes)", bytes.size() - 8,
                                           bytes.size())));
  EXPECT_THAT(error, HasSubstr("restore the data and --resume from a checkpoint saved before the change"));

  // A dataset opened afresh reads its own (new) bytes without complaint; the first loader's batch
  // 0 was what the file held then.
  write_dataset(dir_.path("fresh"), docs_);
  const IndexedDataset fresh = IndexedDataset::open(dir_.path("fresh"));
  const DataLoader again(fresh, opt);
  again.micro_batch(0, 0, 2, 1, tokens, targets);
  EXPECT_EQ(tokens, first);
}

}  // namespace
}  // namespace echo::data
