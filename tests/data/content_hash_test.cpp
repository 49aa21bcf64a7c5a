// content_hash (data/content_hash.h): the fingerprint a checkpoint records of data.train. It must
// follow the content (equal for a copy under another path, different after one changed token or
// a moved document boundary) and cover exactly the bytes it says, checked against a one-shot
// XXH3-64 of a buffer the test assembles itself; so must the hash the token-range scan takes.
#include "data/content_hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>

#include "data/token_range.h"
#include "data_test_util.h"

namespace echo::data {
namespace {

using testing::random_documents;
using testing::write_dataset;

class ContentHashTest : public testing::ScratchDataTest {
 protected:
  uint64_t hash_of(const std::string& name, const std::vector<std::vector<int32_t>>& docs) {
    std::filesystem::create_directories(std::filesystem::path(dir.path(name)).parent_path());
    write_dataset(dir.path(name), docs);
    return content_hash(IndexedDataset::open(dir.path(name)));
  }
  std::vector<std::vector<int32_t>> docs() {
    std::vector<size_t> lengths(static_cast<size_t>(r.uniform(2, 20)));
    for (auto& n : lengths) n = static_cast<size_t>(r.uniform(1, 300));
    return random_documents(lengths, 0, 50000, r.seed);
  }
};

// XXH3-64 of the bytes content_hash.h names, assembled here from the documents themselves.
uint64_t reference_hash(const std::vector<std::vector<int32_t>>& d) {
  std::vector<uint8_t> buffer{static_cast<uint8_t>(TokenDtype::kInt32)};
  uint64_t offset = 0;
  const auto append = [&](const void* p, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    buffer.insert(buffer.end(), bytes, bytes + n);
  };
  append(&offset, sizeof offset);
  for (const auto& doc : d) {
    offset += doc.size();
    append(&offset, sizeof offset);
  }
  for (const auto& doc : d) append(doc.data(), doc.size() * sizeof(int32_t));
  return XXH3_64bits(buffer.data(), buffer.size());
}

TEST_F(ContentHashTest, IsTheXxh3OfDtypeOffsetsAndTokens) {
  const auto d = docs();
  EXPECT_EQ(hash_of("a", d), reference_hash(d));
}

// The trainer takes the hash on the range check's pass (data/token_range.h), chunk by chunk:
// the same hash over data of several chunks with an empty document inside, and an id out of range
// past the first chunk named by its own document and position.
TEST_F(ContentHashTest, TheRangeScanTakesTheSameHashInOnePass) {
  std::vector<size_t> lengths;
  for (size_t total = 0; total < 700000;) total += lengths.emplace_back(static_cast<size_t>(r.uniform(1, 90000)));
  lengths.insert(lengths.begin() + 2, 0);
  auto d = random_documents(lengths, 0, 50000, r.seed);
  write_dataset(dir.path("big"), d);
  EXPECT_EQ(check_token_range_and_hash(IndexedDataset::open(dir.path("big")), 50000, "data.train"), reference_hash(d));

  const size_t doc = d.size() - 1, pos = static_cast<size_t>(r.uniform(0, static_cast<int64_t>(d[doc].size()) - 1));
  d[doc][pos] = 50000 + static_cast<int32_t>(r.uniform(0, 9));
  write_dataset(dir.path("bad"), d);
  const IndexedDataset bad = IndexedDataset::open(dir.path("bad"));
  ASSERT_GT(bad.document_offsets()[doc] + pos, size_t{1} << 18) << "the bad id must lie past the first chunk";
  EXPECT_THAT(
      testing::error_of([&] { check_token_range_and_hash(bad, 50000, "data.train"); }),
      ::testing::HasSubstr(fmt::format("data.train ({}.bin): document {}, position {}: token id {} is out of range "
                                       "[0, 50000)",
                                       dir.path("bad"), doc, pos, d[doc][pos])));
}

TEST_F(ContentHashTest, FollowsTheContentNotThePath) {
  const auto d = docs();
  const uint64_t a = hash_of("a", d);
  EXPECT_EQ(hash_of("elsewhere/b", d), a) << "a copy under another path is the same data";

  auto changed = d;
  auto& doc = changed[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(d.size()) - 1))];
  doc[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(doc.size()) - 1))] ^= 1;
  EXPECT_NE(hash_of("changed", changed), a) << "one token differs";

  // The same token stream with two documents joined: packing puts no EOS between them.
  auto joined = d;
  joined[0].insert(joined[0].end(), joined[1].begin(), joined[1].end());
  joined.erase(joined.begin() + 1);
  EXPECT_NE(hash_of("joined", joined), a) << "a document boundary moved";
}

}  // namespace
}  // namespace echo::data
