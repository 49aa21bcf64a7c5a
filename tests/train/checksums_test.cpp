// Checkpoint checksums without MPI: the XXH3-64 helper against xxHash's published test vectors,
// trainer/checksums.json written and parsed back, and malformed files refused naming the problem.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

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

// verify_safetensors on a real file: every rank's share together covers every tensor once, a
// changed tensor is found by exactly the rank whose share holds it, and a listing that differs
// from the file is refused naming the tensor.
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

}  // namespace
}  // namespace echo::train
