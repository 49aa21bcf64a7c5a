// core/clip_text.h: quoted input is clipped to its start and its size, on a UTF-8 boundary.
#include "core/clip_text.h"

#include <gtest/gtest.h>

#include <string>

namespace echo {
namespace {

TEST(ClipText, ShortTextIsKeptWhole) {
  EXPECT_EQ(clip_text("comm.bits=8"), "comm.bits=8");
  const std::string exactly(kClipBytes, 'x');
  EXPECT_EQ(clip_text(exactly), exactly);
}

TEST(ClipText, LongTextIsItsStartAndItsSize) {
  const std::string huge(1 << 20, 'x');
  EXPECT_EQ(clip_text(huge), std::string(kClipBytes, 'x') + "... (1048576 bytes)");
  EXPECT_EQ(clip_text("abcdef", 3), "abc... (6 bytes)");
}

TEST(ClipText, NeverCutsAUtf8Character) {
  // "é" is two bytes: a cut after 3 bytes of "aéé" would split the second one.
  EXPECT_EQ(clip_text("a\xC3\xA9\xC3\xA9", 4), "a\xC3\xA9... (5 bytes)");
  EXPECT_EQ(clip_text("a\xC3\xA9\xC3\xA9x", 4), "a\xC3\xA9... (6 bytes)");
}

}  // namespace
}  // namespace echo
