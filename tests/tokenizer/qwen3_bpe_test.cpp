// Checks the C++ tokenizer against Qwen3's real tokenizer.json: the ids of
// tests/fixtures/tokenizer/qwen3_cases.json come from the JavaScript reference
// (scripts/make_tokenizer_fixtures.mjs). The tokenizer.json itself is fetched by
// scripts/get_data.sh into data/tokenizer/qwen3/ (or named by ECHO_QWEN3_TOKENIZER). Without it
// the tests skip, unless ECHO_REQUIRE_TOKENIZER is set (CI sets it), where they fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace echo::tokenizer {
namespace {

namespace fs = std::filesystem;

fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

fs::path tokenizer_path() {
  if (const char* env = std::getenv("ECHO_QWEN3_TOKENIZER"); env && *env) return env;
  return repo_root() / "data/tokenizer/qwen3/tokenizer.json";
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> load_cases() {
  const fs::path path = repo_root() / "tests/fixtures/tokenizer/qwen3_cases.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<Case> cases;
  for (const auto& c : nlohmann::json::parse(in)) cases.push_back({c.at("text"), c.at("ids")});
  return cases;
}

std::string nfc(const std::string& text) {
  std::string out;
  return normalize(text, NormalForm::kNFC, out) ? out : text;
}

class Qwen3Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path path = tokenizer_path();
    if (!fs::exists(path)) return;
    tokenizer_ = HfTokenizer::from_file(path.string()).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_) return;
    const std::string why = "Qwen3 tokenizer.json not found at " + tokenizer_path().string() +
                            "; run scripts/get_data.sh --tokenizer-only (or set ECHO_QWEN3_TOKENIZER)";
    if (std::getenv("ECHO_REQUIRE_TOKENIZER") != nullptr) FAIL() << why << " [ECHO_REQUIRE_TOKENIZER is set]";
    GTEST_SKIP() << why;
  }
  static const HfTokenizer& tok() { return *tokenizer_; }

 private:
  static inline HfTokenizer* tokenizer_ = nullptr;
};

TEST_F(Qwen3Tokenizer, Shape) {
  EXPECT_EQ(tok().vocab_size(), 151669);
  EXPECT_EQ(tok().eos_id(), 151643);
  EXPECT_EQ(tok().token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok().token_to_id("<|im_end|>"), 151645);
  // The regexes must run JIT-compiled wherever PCRE2 has a JIT (it does on x86-64 and arm64).
  if (pcre2_jit_available()) {
    EXPECT_TRUE(tok().regex_jit());
  }
}

TEST_F(Qwen3Tokenizer, MatchesTheJavaScriptReference) {
  const std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 50u);
  int num_mismatches = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = tok().encode(c.text);
    EXPECT_EQ(ids, c.ids) << "text: " << nlohmann::json(c.text).dump();
    num_mismatches += ids != c.ids;
    // Decoding gives the text back, composed (NFC is part of encoding).
    EXPECT_EQ(tok().decode(c.ids), nfc(c.text)) << "text: " << nlohmann::json(c.text).dump();
  }
  EXPECT_EQ(num_mismatches, 0) << "of " << cases.size() << " cases";
}

TEST_F(Qwen3Tokenizer, RoundTripsRandomUnicode) {
  // Random code points from ASCII, Latin-1, combining marks, CJK and emoji, and random spaces.
  std::mt19937 rng(7);
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0xFF}, {0x300, 0x36F}, {0x4E00, 0x9FFF}, {0x1F600, 0x1F64F}, {0x3040, 0x30FF}};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      append_utf8(text, lo + rng() % (hi - lo + 1));
    }
    const std::vector<int32_t> ids = tok().encode(text);
    ASSERT_EQ(tok().decode(ids), nfc(text)) << nlohmann::json(text).dump();
  }
}

TEST_F(Qwen3Tokenizer, LongRunsDoNotOverflowTheRegexStack) {
  // `\s+(?!\S)` backtracks over a whole whitespace run; a megabyte of it must still work.
  const std::string spaces(1 << 20, ' ');
  const std::vector<int32_t> ids = tok().encode(spaces + "x");
  EXPECT_EQ(tok().decode(ids), spaces + "x");
  const std::string letters(1 << 18, 'a');
  EXPECT_EQ(tok().decode(tok().encode(letters)), letters);
}

TEST_F(Qwen3Tokenizer, ThreadsAgree) {
  const std::vector<Case> cases = load_cases();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (const Case& c : cases) failures[t] += tok().encode(c.text) != c.ids;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace echo::tokenizer
