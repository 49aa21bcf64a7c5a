// write_file_atomic: the whole text or the old file, never a cut one; no temp file left either way.
#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/scratch_dir.h"
#include "core/error.h"

namespace echo {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, WritesTheWholeTextAndLeavesNoTemp) {
  echo::testing::ScratchDir dir;
  const std::string path = dir.path("out.json");
  write_file_atomic(path, "{\"a\": 1}\n", "--json " + path);
  EXPECT_EQ(read_all(path), "{\"a\": 1}\n");
  write_file_atomic(path, std::string(100000, 'x'), "--json " + path);  // over an existing file
  EXPECT_EQ(read_all(path), std::string(100000, 'x'));
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));
}

// A write that fails part way (here a file-size limit, as a full disk would) throws and leaves the
// old file as it was, with no temp file: it used to leave a truncated file at the target.
TEST(AtomicFile, AFailedWriteKeepsTheOldFile) {
  echo::testing::ScratchDir dir;
  const std::string path = dir.path("out.json");
  write_file_atomic(path, "old\n", "--json " + path);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    write_file_atomic(path, std::string(1 << 20, 'x'), "--json " + path);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("--json " + path), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_all(path), "old\n");
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));
}

TEST(AtomicFile, RefusesADirectoryAndATempThatIsNotAFile) {
  echo::testing::ScratchDir dir;
  const std::string path = dir.path("out.json");
  fs::create_directories(path + "/kept");
  EXPECT_THROW(write_file_atomic(path, "x", "--json " + path), InputError);
  EXPECT_TRUE(fs::is_directory(path + "/kept"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));
  fs::remove_all(path);
  fs::create_directories(path + ".tmp");
  EXPECT_THROW(write_file_atomic(path, "x", "--json " + path), InputError);
  EXPECT_TRUE(fs::is_directory(path + ".tmp"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
}

// A symbolic link stays a link (the file it names gets the new text); a character device such as
// /dev/null is written in place, never renamed over (as root a rename would replace it).
TEST(AtomicFile, FollowsALinkAndWritesADeviceInPlace) {
  echo::testing::ScratchDir dir;
  const std::string real = dir.path("real.json"), link = dir.path("link.json");
  write_file_atomic(real, "old\n", "x");
  fs::create_symlink(real, link);
  write_file_atomic(link, "new\n", "--json " + link);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(read_all(real), "new\n");
  write_file_atomic("/dev/null", "anything\n", "--json /dev/null");
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status("/dev/null")));
}

}  // namespace
}  // namespace echo
