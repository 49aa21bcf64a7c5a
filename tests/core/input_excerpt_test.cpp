// core/input_excerpt.h: quoted input is clipped to its start and its size on a UTF-8 boundary,
// and made printable (control characters and ill-formed UTF-8 escaped, other text kept).
#include "core/input_excerpt.h"

#include <gtest/gtest.h>

#include <string>

namespace echo {
namespace {

TEST(InputExcerpt, ShortTextIsKeptWhole) {
  EXPECT_EQ(input_excerpt("comm.bits=8"), "comm.bits=8");
  const std::string exactly(kExcerptBytes, 'x');
  EXPECT_EQ(input_excerpt(exactly), exactly);
}

TEST(InputExcerpt, LongTextIsItsStartAndItsSize) {
  const std::string huge(1 << 20, 'x');
  EXPECT_EQ(input_excerpt(huge), std::string(kExcerptBytes, 'x') + "... (1048576 bytes)");
  EXPECT_EQ(input_excerpt("abcdef", 3), "abc... (6 bytes)");
}

TEST(InputExcerpt, NeverCutsAUtf8Character) {
  // "é" is two bytes: a cut after 3 bytes of "aéé" would split the second one.
  EXPECT_EQ(input_excerpt("a\xC3\xA9\xC3\xA9", 4), "a\xC3\xA9... (5 bytes)");
  EXPECT_EQ(input_excerpt("a\xC3\xA9\xC3\xA9x", 4), "a\xC3\xA9... (6 bytes)");
}

TEST(InputExcerpt, ControlCharactersAreEscaped) {
  // An ANSI "clear screen" in a config value must not reach the terminal as one.
  EXPECT_EQ(input_excerpt("\x1b[2Jx"), "\\x1b[2Jx");
  EXPECT_EQ(input_excerpt("a\tb\nc\rd"), "a\\tb\\nc\\rd");
  EXPECT_EQ(input_excerpt(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(input_excerpt("\x7f"), "\\x7f");
  // C1 controls are valid UTF-8 (U+009B is CSI to many terminals).
  EXPECT_EQ(input_excerpt("\xC2\x9B" "2J"), "\\u009b2J");
  EXPECT_EQ(input_excerpt("\xC2\x80\xC2\x9F\xC2\xA0"), "\\u0080\\u009f\xC2\xA0");
}

TEST(InputExcerpt, IllFormedUtf8IsEscapedByteByByte) {
  EXPECT_EQ(input_excerpt("a\xFF" "b"), "a\\xffb");
  EXPECT_EQ(input_excerpt("\xC3"), "\\xc3");                      // truncated sequence
  EXPECT_EQ(input_excerpt("\xC0\xAF"), "\\xc0\\xaf");             // overlong "/"
  EXPECT_EQ(input_excerpt("\xED\xA0\x80"), "\\xed\\xa0\\x80");    // a surrogate
  EXPECT_EQ(input_excerpt("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(InputExcerpt, OtherScriptsAndSymbolsAreKept) {
  const std::string text = "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xD0\xB6 \\n";  // 中文 😀 ж \n
  EXPECT_EQ(input_excerpt(text), text);
}

TEST(InputExcerpt, TheClipCountsInputBytesNotEscapes) {
  // Ten ESC bytes clipped at 4: four escapes, and the size of the input.
  EXPECT_EQ(input_excerpt(std::string(10, '\x1b'), 4), "\\x1b\\x1b\\x1b\\x1b... (10 bytes)");
}

}  // namespace
}  // namespace echo
