// The pre-tokenizer regex's \s: Unicode's White_Space, as the Rust tokenizers (Oniguruma), Rust's
// regex and JavaScript have it, not PCRE2's UCP \s, which also matches U+180E.
#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace echo::tokenizer {
namespace {

std::string utf8(char32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

TEST(Regex, RewritesWhiteSpaceEscapesOnly) {
  EXPECT_EQ(with_unicode_white_space(R"(\s+(?!\S)|\s+)"), R"(\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)");
  EXPECT_EQ(with_unicode_white_space(R"( ?[^\s\p{L}\p{N}]+[\r\n]*)"), R"( ?[^\p{White_Space}\p{L}\p{N}]+[\r\n]*)");
  // An escaped backslash before s, other escapes, a quote and a trailing backslash stay.
  EXPECT_EQ(with_unicode_white_space(R"(\\s\d\w\p{L})"), R"(\\s\d\w\p{L})");
  EXPECT_EQ(with_unicode_white_space(R"(\Q\s\E\s\Q\S)"), R"(\Q\s\E\p{White_Space}\Q\S)");
  EXPECT_EQ(with_unicode_white_space("a\\"), "a\\");
  EXPECT_EQ(with_unicode_white_space(""), "");
}

// Every code point (surrogates excepted): \s matches exactly Unicode 15's White_Space (PropList.txt),
// \S exactly the rest, in and out of classes.
TEST(Regex, WhiteSpaceIsUnicodesWhiteSpace) {
  const std::vector<char32_t> white_space = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,   0x1680,
                                             0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
                                             0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  const Regex space(R"(\s)", "test"), not_space(R"(\S)", "test"), in_class(R"([^\s\p{L}\p{N}])", "test");
  std::vector<char32_t> matched;
  std::vector<Match> found;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    const std::string text = utf8(c);
    found.clear();
    space.find_all(text, found);
    const bool is_space = found.size() == 1;
    if (is_space) matched.push_back(c);
    found.clear();
    not_space.find_all(text, found);
    ASSERT_EQ(found.size() == 1, !is_space) << std::hex << "U+" << static_cast<uint32_t>(c);
    if (is_space) {
      found.clear();
      in_class.find_all(text, found);
      ASSERT_TRUE(found.empty()) << std::hex << "U+" << static_cast<uint32_t>(c) << " is space inside a class too";
    }
  }
  EXPECT_EQ(matched, white_space);
  found.clear();
  in_class.find_all(utf8(0x180E), found);
  EXPECT_EQ(found.size(), 1u) << "U+180E is punctuation-like to Qwen's pattern, not space";
}

}  // namespace
}  // namespace echo::tokenizer
