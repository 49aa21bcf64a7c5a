// write_file_atomic: the whole text or the old file, never a cut one; no temp file left either way.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/scratch_dir.h"
#include "core/error.h"

namespace echo {
namespace {

namespace fs = std::filesystem;

// The names in `dir` (a temp file left behind shows up here).
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

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
  EXPECT_EQ(names_in(dir.str()), std::vector<std::string>{"out.json"});
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
  EXPECT_EQ(names_in(dir.str()), std::vector<std::string>{"out.json"});
}

// A directory at the target is refused and kept; a user's own OUT.tmp is neither used nor touched
// (the temp name is unique); the replaced file's mode is kept, a new one gets 0666 less the umask.
TEST(AtomicFile, RefusesADirectoryKeepsOtherFilesAndTheMode) {
  echo::testing::ScratchDir dir;
  const std::string path = dir.path("out.json");
  fs::create_directories(path + "/kept");
  EXPECT_THROW(write_file_atomic(path, "x", "--json " + path), InputError);
  EXPECT_TRUE(fs::is_directory(path + "/kept"));
  fs::remove_all(path);
  std::ofstream(path + ".tmp") << "mine\n";
  write_file_atomic(path, "x", "--json " + path);
  EXPECT_EQ(read_all(path + ".tmp"), "mine\n");
  EXPECT_EQ(names_in(dir.str()), (std::vector<std::string>{"out.json", "out.json.tmp"}));
  const mode_t mask = ::umask(022);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u & ~mask) << "a new file: 0666 less the umask";
  ::umask(mask);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  write_file_atomic(path, "y", "--json " + path);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u) << "the replaced file's mode";
}

// /dev/stdout redirected to a file resolves to that regular file: written in place after what is
// there (here through /proc/self/fd/N of a file opened for appending), never renamed over it,
// which would drop the earlier output and leave later output in the unlinked file.
TEST(AtomicFile, AStreamPathIsAppendedToInPlace) {
  echo::testing::ScratchDir dir;
  const std::string log = dir.path("log.txt");
  std::ofstream(log) << "before\n";
  struct stat st {};
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string stream = "/proc/self/fd/" + std::to_string(fd);
  write_file_atomic(stream, "{\"a\": 1}\n", "--json " + stream);
  ASSERT_EQ(::write(fd, "after\n", 6), 6);
  ::close(fd);
  EXPECT_EQ(read_all(log), "before\n{\"a\": 1}\nafter\n");
  struct stat now {};
  ASSERT_EQ(::stat(log.c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, st.st_ino) << "the file was replaced, not written";
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

// The predicate echo_bench uses to write --json row by row: lexical /dev and /proc paths even when
// they resolve to a regular file (a redirected /dev/stdout), a relative path that normalizes into
// /proc, a FIFO; never a regular file, a missing one, a directory or a link to a regular file.
TEST(AtomicFile, WritesInPlaceTellsStreamsFromFiles) {
  echo::testing::ScratchDir dir;
  const std::string file = dir.path("out.json"), fifo = dir.path("pipe"), link = dir.path("link.json");
  std::ofstream(file) << "x\n";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink(file, link);
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string proc_fd = "/proc/self/fd/" + std::to_string(fd);
  ASSERT_TRUE(fs::is_regular_file(proc_fd)) << "resolves to the regular file";
  EXPECT_TRUE(writes_in_place(proc_fd));
  EXPECT_TRUE(writes_in_place("/dev/stdout"));
  EXPECT_TRUE(writes_in_place("/tmp/../proc/self/fd/" + std::to_string(fd)));
  EXPECT_TRUE(writes_in_place(fifo));
  EXPECT_FALSE(writes_in_place(file));
  EXPECT_FALSE(writes_in_place(link));
  EXPECT_FALSE(writes_in_place(dir.path("missing.json")));
  EXPECT_FALSE(writes_in_place(dir.path("")));
  ::close(fd);
}

}  // namespace
}  // namespace echo
