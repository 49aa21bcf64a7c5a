// safetensors: F32 / BF16 / F16 round trips with random values, the exact bytes of a tiny file,
// reading a hand-built file, and the reader's refusal of malformed files, message by message.
#include "train/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../support/test_data.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "core/half.h"

namespace echo::train {

using echo::testing::error_of;
using echo::testing::kind_and_what_of;
using echo::testing::kNoErrorThrown;
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/echo_safetensors_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given header text, its length as the 8-byte prefix (or `header_len` instead).
std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data,
                              std::optional<uint64_t> header_len = std::nullopt) {
  const uint64_t n = header_len.value_or(header.size());
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

TEST_F(SafetensorsTest, F32RoundTripIsBitExact) {
  const std::vector<StTensorSpec> specs = {{"model.embed_tokens.weight", StDtype::f32, {5, 3}},
                                           {"model.norm.weight", StDtype::f32, {7}},
                                           {"scalar", StDtype::f32, {}},
                                           {"empty", StDtype::f32, {0, 4}},
                                           {"block.weight", StDtype::f32, {2, 3, 4}}};
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : specs[i].shape) n *= d;
    values.push_back(echo::testing::random_normal(static_cast<size_t>(n), 11, i));
  }
  std::vector<std::span<const float>> spans(values.begin(), values.end());
  write_safetensors(path("a.safetensors"), specs, spans, {{"format", "pt"}, {"note", "x"}});

  SafetensorsFile f(path("a.safetensors"));
  EXPECT_EQ(f.metadata(), (StMetadata{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ(f.names().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    ASSERT_TRUE(f.contains(specs[i].name));
    const StTensorInfo& info = f.info(specs[i].name);
    EXPECT_EQ(info.dtype, StDtype::f32);
    EXPECT_EQ(info.shape, specs[i].shape);
    const std::vector<float> back = f.read_f32(specs[i].name);
    ASSERT_EQ(back.size(), values[i].size());
    // NOTE: memcmp must not see the null data() of the empty tensor, even for 0 bytes (UBSan).
    if (!back.empty()) {
      EXPECT_EQ(std::memcmp(back.data(), values[i].data(), back.size() * sizeof(float)), 0);
    }
  }
  // A sub-range read.
  std::vector<float> part(4);
  f.read_f32("model.embed_tokens.weight", 6, part);
  EXPECT_EQ(std::vector<float>(values[0].begin() + 6, values[0].begin() + 10), part);
  EXPECT_NE(error_of([&] { f.read_f32("model.norm.weight", 5, part); }).find("outside its 7 elements"),
            std::string::npos);
}

TEST_F(SafetensorsTest, Bf16AndF16RoundTripRoundToNearestEven) {
  const std::vector<StTensorSpec> specs = {{"h", StDtype::bf16, {4, 33}}, {"f", StDtype::f16, {65}}};
  const auto a = echo::testing::random_normal(4 * 33, 5, 0, 0.0f, 3.0f);
  const auto b = echo::testing::random_normal(65, 5, 1, 0.0f, 3.0f);
  write_safetensors(path("h.safetensors"), specs, {a, b});
  SafetensorsFile f(path("h.safetensors"));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.info("h").dtype, StDtype::bf16);
  EXPECT_EQ(f.info("f").dtype, StDtype::f16);
  const auto ha = f.read_f32("h");
  const auto fb = f.read_f32("f");
  const auto raw = f.bytes("h");
  ASSERT_EQ(raw.size(), a.size() * 2);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(ha[i], round_to_bf16(a[i])) << i;
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * i, 2);
    EXPECT_EQ(bits, float_to_bf16_bits(a[i])) << i;
  }
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(fb[i], round_to_half(b[i])) << i;
  // Rounding really happened: random normals are not all bf16-representable.
  size_t changed = 0;
  for (size_t i = 0; i < a.size(); ++i) changed += ha[i] != a[i];
  EXPECT_GT(changed, a.size() / 2);
}

TEST_F(SafetensorsTest, TinyFileHasTheExactByteLayout) {
  write_safetensors(path("tiny.safetensors"), {{"w", StDtype::f32, {2}}, {"b", StDtype::bf16, {1, 1}}},
                    {std::vector<float>{1.0f, -2.5f}, std::vector<float>{1.5f}}, {{"format", "pt"}});
  const std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]}})"
                             "  ";  // 142 bytes of JSON padded with spaces to 144, a multiple of 8
  std::vector<uint8_t> expected = {0x90, 0, 0, 0, 0, 0, 0, 0};  // 144, little-endian u64
  expected.insert(expected.end(), header.begin(), header.end());
  for (uint8_t byte : {0x00, 0x00, 0x80, 0x3f,  // 1.0f
                       0x00, 0x00, 0x20, 0xc0,  // -2.5f
                       0xc0, 0x3f})             // bf16 1.5 = 0x3fc0
    expected.push_back(byte);
  EXPECT_EQ(read_bytes(path("tiny.safetensors")), expected);
}

TEST_F(SafetensorsTest, ReadsAHandBuiltFile) {
  // As another writer might lay it out: no padding, tensors out of data order, an empty tensor,
  // F16 and an integer tensor (readable as bytes, not convertible to fp32).
  const std::string header =
      R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[6,10]},"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},)"
      R"("i":{"dtype":"I32","shape":[1],"data_offsets":[10,14]},"e":{"dtype":"F32","shape":[0],"data_offsets":[14,14]}})";
  const std::vector<uint8_t> data = {0x80, 0x3f, 0x00, 0xc0, 0x00, 0x00,  // bf16 1, -2, 0
                                     0x00, 0x3c, 0x00, 0xb8,              // f16 1, -0.5
                                     0x07, 0x00, 0x00, 0x00};             // i32 7
  write_bytes(path("hand.safetensors"), raw_file(header, data));
  SafetensorsFile f(path("hand.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "i", "e"}));
  EXPECT_TRUE(f.read_f32("e").empty());
  EXPECT_EQ(f.read_f32("a"), (std::vector<float>{1.0f, -2.0f, 0.0f}));
  EXPECT_EQ(f.read_f32("b"), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(f.info("i").dtype, StDtype::i32);
  EXPECT_EQ(f.bytes("i")[0], std::byte{7});
  const std::string msg = error_of([&] { f.read_f32("i"); });
  EXPECT_NE(msg.find("tensor 'i' is I32"), std::string::npos) << msg;
  const std::string missing = error_of([&] { f.info("zz"); });
  EXPECT_NE(missing.find("has no tensor 'zz'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("hand.safetensors"), std::string::npos) << missing;
}

// Each malformed file: the reader throws, and the message names the file and the problem.
struct Malformed {
  const char* name;
  std::vector<uint8_t> bytes;
  std::vector<std::string> message_parts;
};

TEST_F(SafetensorsTest, RefusesMalformedFilesWithClearMessages) {
  const std::string good = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<uint8_t> eight(8, 0);
  std::vector<uint8_t> truncated = raw_file(good, eight);
  truncated.erase(truncated.end() - 3, truncated.end());  // (resize() here: a false -Wstringop-overflow at -O1)

  const std::vector<Malformed> cases = {
      {"short", {1, 2, 3}, {"is 3 bytes, too short for the 8-byte header length"}},
      {"header_too_big", raw_file(good, eight, 1000), {"header length 1000 exceeds the 62 bytes that follow it"}},
      {"truncated", truncated, {"tensor 't'", "data_offsets [0, 8] exceed the 5 bytes of data", "truncated"}},
      {"not_json", raw_file("{\"t\": [1, 2", {}), {"the header is not valid JSON"}},
      {"not_object", raw_file("[1, 2]", {}), {"the header is not a JSON object"}},
      // A name twice: nlohmann keeps the last entry, which would load other bytes than the first.
      {"name_twice",
       raw_file(
           R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       {"the header names 't' twice"}},
      {"backwards",
       raw_file(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       {"tensor 't'", "data_offsets [8, 0] run backwards"}},
      {"shape_mismatch",
       raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       {"tensor 't'", "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8 bytes"}},
      {"dtype_mismatch",
       raw_file(R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor 't'", "shape [2] of BF16 needs 4 bytes but data_offsets [0, 8] span 8 bytes"}},
      {"overlap",
       raw_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       {"tensors 'a' (bytes [0, 8)) and 'b' (bytes [4, 8)) overlap"}},
      // The reference reader refuses unused bytes between tensors and after the last one.
      {"gap",
       raw_file(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})",
           eight),
       {"data bytes [4, 6) before tensor 'b' belong to no tensor"}},
      {"gap_at_start",
       raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       {"data bytes [0, 4) before tensor 't' belong to no tensor"}},
      {"trailing_bytes",
       raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       {"4 bytes follow the last tensor's data (bytes [4, 8) belong to no tensor"}},
      {"unknown_dtype",
       raw_file(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor 't'", "unknown safetensors dtype 'F33'"}},
      {"negative_dim",
       raw_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       {"tensor 't'", "shape [-2] must hold non-negative integers"}},
      // 2^64 - 8 fits uint64 but its end, 2^64, does not: a whole number out of range, not "non-negative integers".
      {"offset_past_uint64",
       raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551616]}})",
                eight),
       {"tensor 't'", "offset 1.8446744073709552e+19 is out of range: beyond 2^64 - 1",
        "this one holds 8 bytes of data"}},
      {"fractional_offset",
       raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,7.5]}})", eight),
       {"tensor 't'", "data_offsets [0, 7.5] must be non-negative integers"}},
      {"float_offset",  // a whole number written as a float is not out of range, only not an integer
       raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", eight),
       {"tensor 't'", "data_offsets [0, 8.0] must be non-negative integers"}},
      {"missing_offsets",
       raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", eight),
       {"tensor 't'", "'data_offsets' must be an array of two integers"}},
      {"bad_metadata",
       raw_file(R"({"__metadata__":{"format":1}})", {}),
       {"'__metadata__' entry 'format' is not a string"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = path(std::string(c.name) + ".safetensors");
    write_bytes(file, c.bytes);
    const std::string msg = error_of([&] { SafetensorsFile f(file); });
    ASSERT_NE(msg, kNoErrorThrown) << "no error for " << c.name;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    for (const auto& part : c.message_parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  // The well-formed one the cases were derived from opens.
  write_bytes(path("good.safetensors"), raw_file(good, eight));
  EXPECT_EQ(SafetensorsFile(path("good.safetensors")).read_f32("t"), (std::vector<float>{0.0f, 0.0f}));
  const std::string missing = error_of([&] { SafetensorsFile f(path("nope.safetensors")); });
  EXPECT_NE(missing.find("cannot open safetensors file"), std::string::npos) << missing;
}

TEST_F(SafetensorsTest, WriterChecksRangesAndCompleteness) {
  SafetensorsWriter w(path("w.safetensors"), {{"a", StDtype::f32, {2, 2}}, {"b", StDtype::bf16, {3}}});
  const std::vector<float> two = {1.0f, 2.0f};
  w.write(0, 2, two);
  std::string msg = error_of([&] { w.write(0, 3, two); });
  EXPECT_NE(msg.find("elements [3, 5) of tensor 'a' are outside its 4 elements"), std::string::npos) << msg;
  w.write(0, 0, two);
  msg = error_of([&] { w.close(); });
  EXPECT_NE(msg.find("0 of the 3 elements of tensor 'b' written"), std::string::npos) << msg;
  const std::vector<float> three = {0.5f, -1.0f, 3.0f};
  w.write(1, 0, three);
  w.close();
  SafetensorsFile f(path("w.safetensors"));
  EXPECT_EQ(f.read_f32("a"), (std::vector<float>{1.0f, 2.0f, 1.0f, 2.0f}));
  EXPECT_EQ(f.read_f32("b"), three);
  msg = error_of([&] {
    SafetensorsWriter bad(path("d.safetensors"), {{"a", StDtype::f32, {1}}, {"a", StDtype::f32, {1}}});
  });
  EXPECT_NE(msg.find("tensor 'a' given twice"), std::string::npos) << msg;
}

// A full disk (/dev/full answers every write with ENOSPC) is a run error naming the file, the
// byte and what to do about it.
TEST_F(SafetensorsTest, AFullDiskSaysToFreeSpaceOrKeepFewerCheckpoints) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  const std::vector<float> values = {1.0f, 2.0f};
  EXPECT_EQ(kind_and_what_of([&] {
              write_safetensors("/dev/full", {{"a", StDtype::f32, {2}}}, {values});
            }),
            "run: writing safetensors file '/dev/full' failed at byte 0: No space left on device (free space there, "
            "or lower train.keep_checkpoints: a checkpoint save needs room for one more checkpoint beside the ones "
            "kept)");
}

// Hostile headers end in an input error with a short message, never a crash: a shape nested
// 100,000 deep (printing it for the message overflowed the stack), a shape whose product
// overflows int64 before a zero dimension, and a huge shape (the message shows an excerpt).
TEST_F(SafetensorsTest, RefusesHostileHeadersWithShortInputErrors) {
  const std::vector<uint8_t> eight(8, 0);
  const std::string deep = R"({"t":{"dtype":"F32","shape":)" + std::string(100'000, '[') + std::string(100'000, ']') +
                           R"(,"data_offsets":[0,8]}})";
  write_bytes(path("deep.safetensors"), raw_file(deep, eight));
  std::string msg = kind_and_what_of([&] { SafetensorsFile f(path("deep.safetensors")); });
  EXPECT_EQ(msg.rfind("input: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("nests arrays/objects more than 128 deep (at header byte 154)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[at "), std::string::npos) << msg;

  // 2^62 * 2 = 2^63 overflows int64 (though not uint64), and the trailing 0 made it "empty".
  write_bytes(path("overflow.safetensors"),
              raw_file(R"({"t":{"dtype":"F32","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})", {}));
  msg = kind_and_what_of([&] { SafetensorsFile f(path("overflow.safetensors")); });
  EXPECT_EQ(msg.rfind("input: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("tensor 't': shape [4611686018427387904, 2, 0] overflows"), std::string::npos) << msg;
  // The same magnitudes without overflow open, and an empty tensor reads as empty.
  write_bytes(path("big_empty.safetensors"),
              raw_file(R"({"t":{"dtype":"F32","shape":[4611686018427387904,0,1],"data_offsets":[0,0]}})", {}));
  SafetensorsFile big_empty(path("big_empty.safetensors"));
  EXPECT_EQ(big_empty.info("t").numel(), 0);
  EXPECT_TRUE(big_empty.read_f32("t").empty());

  std::string huge = R"({"t":{"dtype":"F32","shape":[-1)";
  for (int i = 0; i < 100'000; ++i) huge += ",7";
  huge += R"(],"data_offsets":[0,8]}})";
  write_bytes(path("huge.safetensors"), raw_file(huge, eight));
  msg = kind_and_what_of([&] { SafetensorsFile f(path("huge.safetensors")); });
  EXPECT_NE(msg.find("shape [-1, 7, 7, "), std::string::npos) << msg;
  EXPECT_NE(msg.find(", ...] must hold non-negative integers"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;

  // Other malformed files are input errors too; a missing tensor as well.
  write_bytes(path("short.safetensors"), {1, 2, 3});
  msg = kind_and_what_of([&] { SafetensorsFile f(path("short.safetensors")); });
  EXPECT_EQ(msg.rfind("input: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find("[at "), std::string::npos) << msg;
  msg = kind_and_what_of([&] { big_empty.info("nope"); });
  EXPECT_EQ(msg.rfind("input: ", 0), 0u) << msg;
}

}  // namespace
}  // namespace echo::train
