// Checkpoint checksums without MPI: the XXH3-64 helper against xxHash's published test vectors,
// trainer/checksums.json written and parsed back, malformed files refused naming the problem, and
// the split of a load's hashing over ranks (each tensor once, by rank item % P).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../support/scratch_dir.h"
#include "../support/test_data.h"
#include "../support/test_util.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/safetensors.h"

namespace echo::train {
namespace {

using echo::testing::error_of;
namespace fs = std::filesystem;

// xxHash's sanity buffer (cli/xsum_sanity_check.c, XSUM_fillTestBuffer): byte i is the top byte
// of PRIME32 · PRIME64^i mod 2^64.
std::vector<std::byte> sanity_buffer(size_t len) {
  constexpr uint64_t kPrime32 = 2654435761u, kPrime64 = 11400714785074694797ull;
  std::vector<std::byte> out(len);
  uint64_t gen = kPrime32;
  for (auto& b : out) {
    b = static_cast<std::byte>(gen >> 56);
    gen *= kPrime64;
  }
  return out;
}

// XSUM_XXH3_testdata, seed 0 (xxHash's published XXH3_64bits results), one length per code path:
// 1-3, 4-8, 9-16, 17-128, 129-240 bytes and the long-input loop (blocks, overlapping last stripe).
TEST(ChecksumsTest, Xxh3MatchesXxHashTestVectors) {
  EXPECT_EQ(xxh3_64(std::span<const std::byte>{}), 0x2D06800538D394C2ull);
  EXPECT_EQ(xxh3_64(std::string_view{}), 0x2D06800538D394C2ull);
  const std::vector<std::byte> buf = sanity_buffer(2367);
  const std::pair<size_t, uint64_t> vectors[] = {
      {1, 0xC44BDFF4074EECDBull},    {6, 0x27B56A84CD2D7325ull},    {12, 0xA713DAF0DFBB77E7ull},
      {24, 0xA3FE70BF9D3510EBull},   {48, 0x397DA259ECBA1F11ull},   {80, 0xBCDEFBBB2C47C90Aull},
      {195, 0xCD94217EE362EC3Aull},  {403, 0xCDEB804D65C6DEA4ull},  {512, 0x617E49599013CB6Bull},
      {2048, 0xDD59E2C3A5F038E0ull}, {2240, 0x6E73A90539CF2948ull}, {2367, 0xCB37AEB9E5D361EDull}};
  for (const auto& [len, want] : vectors)
    EXPECT_EQ(xxh3_64(std::span<const std::byte>(buf.data(), len)), want) << "length " << len;
  // The string form hashes the same bytes.
  const std::string text(reinterpret_cast<const char*>(buf.data()), 403);
  EXPECT_EQ(xxh3_64(text), 0xCDEB804D65C6DEA4ull);
  EXPECT_EQ(checksum_hex(0x2D06800538D394C2ull), "2d06800538d394c2");
  EXPECT_EQ(checksum_hex(0x1f), "000000000000001f");
}

CheckpointChecksums sample_sums() {
  CheckpointChecksums sums;
  sums.safetensors["model.safetensors"] = {0x0123456789abcdefull, {{"a.weight", 1}, {"b.weight", ~0ull}}};
  sums.files["config.json"] = 0xfedcba9876543210ull;
  return sums;
}

TEST(ChecksumsTest, JsonRoundTrips) {
  const CheckpointChecksums sums = sample_sums();
  const std::string text = checksums_json(sums);
  EXPECT_NE(text.find("\"algorithm\": \"xxh3-64\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"b.weight\": \"ffffffffffffffff\""), std::string::npos) << text;
  const CheckpointChecksums back = parse_checksums(text, "x.json");
  EXPECT_EQ(back.files, sums.files);
  ASSERT_EQ(back.safetensors.size(), 1u);
  EXPECT_EQ(back.safetensors.at("model.safetensors").header, 0x0123456789abcdefull);
  EXPECT_EQ(back.safetensors.at("model.safetensors").tensors, sums.safetensors.at("model.safetensors").tensors);
}

TEST(ChecksumsTest, MalformedJsonIsRefusedNamingTheProblem) {
  const std::string good = checksums_json(sample_sums());
  auto msg_of = [](const std::string& text) {
    return error_of([&] { parse_checksums(text, "/ck/trainer/checksums.json"); });
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const std::pair<std::string, std::string> cases[] = {
      {good.substr(0, good.size() / 2), "is not valid JSON"},
      {"\x7f\x45\x4c\x46 garbage", "is not valid JSON"},
      {"[1, 2]", "malformed: not a JSON object"},
      {replaced("echo-checksums", "other"), "'format' is not \"echo-checksums\""},
      {replaced("\"version\": 1", "\"version\": 2"), "'version' is not 1"},
      {replaced("xxh3-64", "sha256"), "'algorithm' is not \"xxh3-64\""},
      {replaced("0000000000000001", "00000000000001"), "tensor 'a.weight' of 'model.safetensors' is not 16 hex"},
      {replaced("0000000000000001", "000000000000000g"), "tensor 'a.weight' of 'model.safetensors' is not 16 hex"},
      {replaced("\"fedcba9876543210\"", "\"7\""), "the checksum of 'config.json' is not 16 hex digits"},
      {replaced("\"fedcba9876543210\"", "7"), "the entry of 'config.json' is neither a checksum nor"},
      {replaced("\"header\"", "\"heder\""), "the entry of 'model.safetensors' is neither"},
      {std::string(1000, '['), "nests arrays/objects more than"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string msg = msg_of(text);
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
    EXPECT_NE(msg.find("/ck/trainer/checksums.json"), std::string::npos) << msg;
  }
}

// verify_safetensors on a real file: a changed tensor is found by exactly the rank whose share
// holds it (the whole partition is checked in the next test), and a listing that differs from the
// file is refused naming the tensor.
TEST(ChecksumsTest, VerifySplitsTensorsOverRanksAndNamesMismatches) {
  char tmpl[] = "/tmp/echo_checksums_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const std::string path = (dir / "model.safetensors").string();
  std::vector<StTensorSpec> specs;
  std::vector<std::vector<float>> values;
  for (int i = 0; i < 5; ++i) {
    specs.push_back({fmt::format("t{}", i), StDtype::f32, {3, 7}});
    values.push_back(echo::testing::random_normal(21, 5, i));
  }
  write_safetensors(path, specs, {values.begin(), values.end()});
  CheckpointChecksums sums;
  {
    SafetensorsFile file(path);
    sums.safetensors["model.safetensors"] = checksum_safetensors(file);
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_EQ(verify_safetensors(sums, dir.string(), "model.safetensors", file, {rank, 3, 0}), 5u);
  }
  // Tensor t3 changed: with items counted from 1 it is item 4, rank 1's of 3.
  CheckpointChecksums changed = sums;
  changed.safetensors["model.safetensors"].tensors["t3"] ^= 1;
  SafetensorsFile file(path);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string msg =
        error_of([&] { verify_safetensors(changed, dir.string(), "model.safetensors", file, {rank, 3, 1}); });
    if (rank != 1) {
      EXPECT_EQ(msg, echo::testing::kNoErrorThrown) << rank;
      continue;
    }
    EXPECT_NE(msg.find(fmt::format("'{}': tensor 't3' in model.safetensors does not match its checksum (stored 0x",
                                   dir.string())),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("disk or copy corruption"), std::string::npos) << msg;
  }
  CheckpointChecksums missing = sums, extra = sums, header = sums;
  missing.safetensors["model.safetensors"].tensors.erase("t2");
  extra.safetensors["model.safetensors"].tensors["t9"] = 4;
  header.safetensors["model.safetensors"].header ^= 1;
  EXPECT_NE(error_of([&] { verify_safetensors(missing, "d", "model.safetensors", file, {}); })
                .find("has no checksum for tensor 't2' of model.safetensors"),
            std::string::npos);
  EXPECT_NE(error_of([&] { verify_safetensors(extra, "d", "model.safetensors", file, {}); })
                .find("lists tensor 't9' of model.safetensors, which the file does not hold"),
            std::string::npos);
  EXPECT_NE(error_of([&] { verify_safetensors(header, "d", "model.safetensors", file, {}); })
                .find("the header of model.safetensors does not match its checksum"),
            std::string::npos);
  EXPECT_NE(error_of([&] { verify_safetensors(sums, "d", "other.safetensors", file, {}); })
                .find("has no entry for other.safetensors"),
            std::string::npos);
  fs::remove_all(dir);
}

// The whole partition of a load's hashing, for many world sizes and tensor counts: every item is
// hashed by exactly one rank, rank (first_item + k) % P for the tensor in data position k, and the
// item count verify_safetensors returns carries the count on into the next file (a model file
// then an optimizer file, as a load does). Whether a rank hashed a tensor shows as whether it
// finds that tensor's stored checksum changed.
TEST(ChecksumsTest, EveryTensorIsHashedOnceByRankItemModP) {
  echo::testing::ScratchDir dir;
  std::mt19937_64 gen(20240611);  // fixed: the same cases each run
  struct Case {
    int num_ranks;
    size_t num_first, num_second, first_item;
  };
  std::vector<Case> cases = {{1, 3, 2, 0}, {2, 1, 1, 0},   {2, 5, 4, 0}, {3, 2, 7, 1},
                             {4, 3, 3, 0}, {4, 25, 50, 0}, {5, 2, 1, 3}, {8, 3, 5, 6}};  // P > n: idle ranks
  for (int i = 0; i < 12; ++i) {
    std::uniform_int_distribution<int> ranks(1, 9);
    std::uniform_int_distribution<size_t> count(1, 13), first(0, 20);
    cases.push_back({ranks(gen), count(gen), count(gen), first(gen)});
  }
  int file_idx = 0;
  // A file of `n` small tensors of different sizes, named in the reverse of data order.
  auto make_file = [&](size_t n) {
    const std::string path = dir.path(fmt::format("f{}.safetensors", file_idx++));
    std::vector<StTensorSpec> specs;
    std::vector<std::vector<float>> values;
    for (size_t t = 0; t < n; ++t) {
      const int64_t cols = 1 + static_cast<int64_t>((t * 5) % 7);
      specs.push_back({fmt::format("w{:02}", n - 1 - t), StDtype::f32, {2, cols}});
      values.push_back(echo::testing::random_normal(static_cast<size_t>(2 * cols), 7, file_idx * 1000 + t));
    }
    write_safetensors(path, specs, {values.begin(), values.end()});
    return path;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(
        fmt::format("{} ranks, {} + {} tensors from item {}", c.num_ranks, c.num_first, c.num_second, c.first_item));
    const SafetensorsFile first(make_file(c.num_first)), second(make_file(c.num_second));
    CheckpointChecksums sums;
    sums.safetensors["a.safetensors"] = checksum_safetensors(first);
    sums.safetensors["b.safetensors"] = checksum_safetensors(second);
    // Which ranks find item k of the load (both files, data order) changed.
    std::vector<std::vector<int>> found;
    for (const auto& [rel, file] : {std::pair{"a.safetensors", &first}, std::pair{"b.safetensors", &second}}) {
      for (const auto& name : file->names()) {
        CheckpointChecksums changed = sums;
        changed.safetensors[rel].tensors.at(name) ^= 0x100;
        std::vector<int> ranks;
        for (int rank = 0; rank < c.num_ranks; ++rank) {
          ChecksumShare share{rank, c.num_ranks, c.first_item};
          const std::string msg = error_of([&] {
            share.first_item += verify_safetensors(changed, "d", "a.safetensors", first, share);
            verify_safetensors(changed, "d", "b.safetensors", second, share);
          });
          if (msg == echo::testing::kNoErrorThrown) continue;
          EXPECT_NE(msg.find(fmt::format("tensor '{}' in {} does not match its checksum", name, rel)),
                    std::string::npos)
              << msg;
          ranks.push_back(rank);
        }
        found.push_back(ranks);
      }
    }
    ASSERT_EQ(found.size(), c.num_first + c.num_second);
    for (size_t k = 0; k < found.size(); ++k)
      EXPECT_EQ(found[k], std::vector<int>{static_cast<int>((c.first_item + k) % c.num_ranks)}) << "item " << k;
    // Unchanged, every rank passes and counts the file's tensors.
    for (int rank = 0; rank < c.num_ranks; ++rank) {
      EXPECT_EQ(verify_safetensors(sums, "d", "a.safetensors", first, {rank, c.num_ranks, c.first_item}), c.num_first);
      EXPECT_EQ(verify_safetensors(sums, "d", "b.safetensors", second, {rank, c.num_ranks, c.first_item + 7}),
                c.num_second);
    }
  }
}

}  // namespace
}  // namespace echo::train
