// normalize() against utf8proc_map, the reference it replaces: the same bytes in every normal
// form on random text dense in combining marks (several combining classes, marks that decompose
// into two, Hangul jamo, singletons, compatibility forms), and a run of marks far too long for
// utf8proc's quadratic ordering still normalized (it took about an hour for a 2 MB run).
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace echo::tokenizer {
namespace {

struct Form {
  NormalForm form;
  int options;
  const char* name;
};

const Form kForms[] = {{NormalForm::kNFC, UTF8PROC_STABLE | UTF8PROC_COMPOSE, "NFC"},
                       {NormalForm::kNFD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, "NFD"},
                       {NormalForm::kNFKC, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, "NFKC"},
                       {NormalForm::kNFKD, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, "NFKD"}};

std::string reference(const std::string& text, int options) {
  utf8proc_uint8_t* raw = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &raw,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(raw, &std::free);
  EXPECT_GE(n, 0);
  return n < 0 ? "" : std::string(reinterpret_cast<const char*>(raw), static_cast<size_t>(n));
}

std::string ours(const std::string& text, NormalForm form) {
  std::string out;
  return normalize(text, form, out) ? out : text;
}

TEST(UnicodeNormalize, EqualsUtf8procOnRandomTextDenseInMarks) {
  const std::vector<char32_t> pool = {
      'a',     'e',     'o',     'A',     ' ',     0xE9,    0xC5,    0x212B,  0x1E0A,  0x1EA1,  0x0301,  0x0300,
      0x0323,  0x0327,  0x031B,  0x0345,  0x0344,  0x0F73,  0x0F75,  0x05B0,  0x05B4,  0x093C,  0x0915,  0x3099,
      0x304B,  0x1DF6,  0x0308,  0x03B9,  0x1100,  0x1161,  0x11A8,  0xAC00,  0xF900,  0xFB01,  0xFDFA,  0x2126,
      0x00BD,  0x1F600, 0x0301,  0x0323,  0x0345,  0x1D165, 0x1D16E, 0x0591,  0x302A,  0x20D2,  0x0CBC,  0x0E38};
  std::mt19937 rng(20261204);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1), length(1, 40);
  for (int i = 0; i < 4000; ++i) {
    std::string text;
    const size_t n = length(rng);
    for (size_t k = 0; k < n; ++k) append_utf8(text, pool[pick(rng)]);
    for (const Form& f : kForms) ASSERT_EQ(ours(text, f.form), reference(text, f.options)) << f.name << " case " << i;
  }
}

TEST(UnicodeNormalize, ALongRunOfMarksIsOrderedAndComposed) {
  // a + (acute 230, dot below 220) x n: the dots go first, a + dot below composes to U+1EA1.
  const auto run = [](int n) {
    std::string text = "a";
    for (int k = 0; k < n; ++k) {
      append_utf8(text, 0x0301);
      append_utf8(text, 0x0323);
    }
    return text;
  };
  const std::string small = run(3000);
  EXPECT_EQ(ours(small, NormalForm::kNFC), reference(small, kForms[0].options));
  const int n = 200000;
  std::string expected;
  append_utf8(expected, 0x1EA1);
  for (int k = 1; k < n; ++k) append_utf8(expected, 0x0323);
  for (int k = 0; k < n; ++k) append_utf8(expected, 0x0301);
  EXPECT_EQ(ours(run(n), NormalForm::kNFC), expected);
}

}  // namespace
}  // namespace echo::tokenizer
