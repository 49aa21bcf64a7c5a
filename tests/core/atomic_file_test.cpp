// write_file_atomic: the whole text or the old file, never a cut one; no temp file left either way.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

// /dev/stdout redirected to a file resolves to that regular file: the text is written through
// the descriptor itself (here /proc/self/fd/N of a file opened as a shell's `>` opens it, not for
// appending), at its position, never renamed over it (which would drop the earlier output and leave
// later output in the unlinked file) nor reopened (a new offset, overwritten by later output).
TEST(AtomicFile, AStreamPathIsWrittenThroughItsDescriptor) {
  echo::testing::ScratchDir dir;
  const std::string log = dir.path("log.txt");
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "before\n", 7), 7);
  struct stat st {};
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  const std::string stream = "/proc/self/fd/" + std::to_string(fd);
  EXPECT_EQ(own_descriptor_named(stream), fd);
  write_file_atomic(stream, "{\"a\": 1}\n", "--json " + stream);
  ASSERT_EQ(::write(fd, "after\n", 6), 6);
  ::close(fd);
  EXPECT_EQ(read_all(log), "before\n{\"a\": 1}\nafter\n");
  struct stat now {};
  ASSERT_EQ(::stat(log.c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, st.st_ino) << "the file was replaced, not written";
}

// A child process whose standard output is redirected to `log` as a shell's `>` does prints
// "before" (buffered by stdio), writes "json" to `target` with write_file_atomic, prints "after";
// what `log` then holds.
std::string redirected_child_output(const std::string& log, const std::string& target) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0) ::_exit(2);
    std::printf("before\n");
    try {
      write_file_atomic(target, "json\n", "--json " + target);
    } catch (...) {
      ::_exit(3);
    }
    std::printf("after\n");
    std::fflush(stdout);
    ::_exit(0);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return "fork or wait failed";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child failed, status " + std::to_string(status);
  return read_all(log);
}

// `--json /dev/stdout > out.txt` run without mpirun: every spelling of standard output (a link to
// it, the redirected file's own name) puts the text between what was printed before and after.
TEST(AtomicFile, StandardOutputRedirectedToAFileGetsTheTextInOrder) {
  echo::testing::ScratchDir dir;
  const std::string log = dir.path("out.txt"), link = dir.path("link");
  fs::create_symlink("/dev/stdout", link);
  for (const std::string& target :
       {std::string("/dev/stdout"), std::string("/dev/fd/1"), std::string("/proc/self/fd/1"), link, log})
    EXPECT_EQ(redirected_child_output(log, target), "before\njson\nafter\n") << target;
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

// The predicate echo_bench uses to write --json row by row: this process's descriptors by any
// spelling (also when they resolve to a regular file: a redirected /dev/stdout), another process's
// /proc/<pid>/fd/N, a FIFO, /dev/null; never a regular file (under /dev/shm, or named relatively
// from there, too), a missing one, a directory or a link to a regular file.
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
  EXPECT_TRUE(writes_in_place("/proc/1/fd/1"));
  EXPECT_TRUE(writes_in_place(fifo));
  EXPECT_TRUE(writes_in_place("/dev/null"));
  EXPECT_FALSE(writes_in_place(file));
  EXPECT_FALSE(writes_in_place(link));
  EXPECT_FALSE(writes_in_place(dir.path("missing.json")));
  EXPECT_FALSE(writes_in_place(dir.path("")));
  EXPECT_EQ(own_descriptor_named(file), -1) << "open here, but not standard output";
  EXPECT_EQ(own_descriptor_named("/proc/1/fd/1"), -1);
  ::close(fd);

  // /dev/shm holds regular files (tmpfs): replaced like any other, by absolute or relative name.
  std::string shm = "/dev/shm/echo_atomic_XXXXXX";
  ASSERT_NE(::mkdtemp(shm.data()), nullptr);
  const std::string in_shm = shm + "/out.json";
  std::ofstream(in_shm) << "old\n";
  EXPECT_FALSE(writes_in_place(in_shm));
  const fs::path cwd = fs::current_path();
  fs::current_path(shm);
  EXPECT_FALSE(writes_in_place("out.json"));
  write_file_atomic("out.json", "new\n", "--json out.json");
  fs::current_path(cwd);
  EXPECT_EQ(read_all(in_shm), "new\n") << "replaced, not appended to";
  fs::remove_all(shm);
}

// why_not_writable names what would stop write_file_atomic before its first byte, and says
// nothing where it would succeed (each verdict then checked by writing).
TEST(AtomicFile, WhyNotWritableNamesTheFolderThatStopsAWrite) {
  echo::testing::ScratchDir dir;
  const std::string fresh = dir.path("new.json"), file = dir.path("file");
  EXPECT_EQ(why_not_writable(fresh), "");
  write_file_atomic(fresh, "{}", "--json");
  EXPECT_EQ(why_not_writable(fresh), "") << "an existing file is replaced";
  EXPECT_EQ(why_not_writable(dir.str()), "it is a directory");
  EXPECT_EQ(why_not_writable(dir.path("missing/x.json")), "its folder '" + dir.path("missing") + "' does not exist");
  EXPECT_THROW(write_file_atomic(dir.path("missing/x.json"), "{}", "--json"), Error);
  write_file_atomic(file, "x", "--json");
  EXPECT_EQ(why_not_writable(file + "/x.json"), "its folder '" + file + "' is not a folder");
  EXPECT_THROW(write_file_atomic(file + "/x.json", "{}", "--json"), Error);
  EXPECT_EQ(why_not_writable("/dev/null"), "") << "a device is written in place";
  if (::geteuid() != 0) {  // root writes into a folder of mode 0555 anyway
    fs::create_directory(dir.path("ro"));
    fs::permissions(dir.path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_EQ(why_not_writable(dir.path("ro/x.json")),
              "its folder '" + dir.path("ro") + "' is not writable: Permission denied");
    fs::permissions(dir.path("ro"), fs::perms::owner_all);
  }
}

// Found by a hostile test of echo_eval --json: a dangling link passed the check and was then
// replaced by a file; a link into a missing folder passed too; "out.json/" was told its folder
// 'out.json' did not exist; a FIFO no one reads passed and the write blocked after the evaluation.
TEST(AtomicFile, LinksFolderNamesAndFifosAreJudgedAsTheWriteWouldMeetThem) {
  echo::testing::ScratchDir dir;
  // A dangling link: the file is made where it points, the link stays.
  fs::create_directory(dir.path("real"));
  const std::string dangling = dir.path("dangling.json");
  fs::create_symlink("real/made.json", dangling);  // relative to the link's folder
  EXPECT_EQ(why_not_writable(dangling), "");
  write_file_atomic(dangling, "{}", "--json");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dangling)));
  EXPECT_EQ(read_all(dir.path("real/made.json")), "{}");
  // A chain of links into a folder that does not exist names that folder.
  fs::create_symlink(dir.path("missing/x.json"), dir.path("deep.json"));
  fs::create_symlink("deep.json", dir.path("chain.json"));
  EXPECT_EQ(why_not_writable(dir.path("chain.json")), "the folder '" + dir.path("missing") +
                                                          "' of its link's target '" + dir.path("missing/x.json") +
                                                          "' does not exist");
  // A relative chain through a linked folder: each hop is relative to where the kernel finds the
  // link (here a/dlink/x.json is other/real/x.json, whose "../y.json" is other/y.json).
  fs::create_directories(dir.path("a"));
  fs::create_directories(dir.path("other/real"));
  fs::create_symlink("dlink/x.json", dir.path("a/out"));
  fs::create_symlink("../other/real", dir.path("a/dlink"));
  fs::create_symlink("../y.json", dir.path("other/real/x.json"));
  EXPECT_EQ(why_not_writable(dir.path("a/out")), "");
  write_file_atomic(dir.path("a/out"), "chained", "--json");
  EXPECT_EQ(read_all(dir.path("other/y.json")), "chained");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir.path("a/out"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir.path("other/real/x.json"))));
  // A loop of three links: refused by the check and by the write, which once renamed a file over
  // one of its links.
  fs::create_symlink("loop_b", dir.path("loop_a"));
  fs::create_symlink("loop_c", dir.path("loop_b"));
  fs::create_symlink("loop_a", dir.path("loop_c"));
  EXPECT_EQ(why_not_writable(dir.path("loop_a")).rfind("it is a symbolic link that leads round in a loop", 0), 0u)
      << why_not_writable(dir.path("loop_a"));
  EXPECT_THROW(write_file_atomic(dir.path("loop_a"), "{}", "--json"), InputError);
  for (const char* link : {"loop_a", "loop_b", "loop_c"})
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir.path(link))));
  // A dangling link to a folder's name.
  fs::create_symlink(dir.path("missing") + "/", dir.path("to_missing_folder"));
  EXPECT_EQ(why_not_writable(dir.path("to_missing_folder")),
            "it is a symbolic link to '" + dir.path("missing") + "/', a folder's name");
  EXPECT_THROW(write_file_atomic(dir.path("to_missing_folder"), "{}", "--json"), InputError);
  // Names of a folder's form.
  for (const std::string& name : {dir.path("out.json/"), dir.path("out.json/."), dir.path("out.json/..")}) {
    EXPECT_EQ(why_not_writable(name), "the name ends as a folder's does ('/', '.' or '..'), not as a file's") << name;
  }
  EXPECT_THROW(write_file_atomic(dir.path("out.json/"), "{}", "--json"), InputError);
  EXPECT_FALSE(fs::exists(dir.path("out.json")));
  fs::create_symlink(dir.path("real") + "/", dir.path("to_folder"));
  EXPECT_EQ(why_not_writable(dir.path("to_folder")), "it is a directory");
  // A socket is named as one (open(2) says ENXIO, as for a FIFO without a reader).
  const std::string sock = dir.path("sock");
  const int sfd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sfd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(sfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(why_not_writable(sock), "cannot open it for writing: it is a socket, which open(2) cannot write to");
  ::close(sfd);
  // A FIFO no one reads: refused after a short wait for a reader, by the check and by the write
  // (no hang).
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string no_reader =
      "it is a FIFO that no one opened for reading within 3 s (writing would wait for a reader)";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(why_not_writable(fifo), "cannot open it for writing: " + no_reader);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  try {
    write_file_atomic(fifo, "{}", "--json fifo");
    ADD_FAILURE() << "a FIFO no one reads was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--json fifo: cannot open for writing: " + no_reader), std::string::npos)
        << e.what();
  }
  // A FIFO that is read passes, and its reader gets the result whole: the check's own open must not
  // end the reader's stream (end-of-file) before the write.
  const std::string heard = dir.path("heard");  // what the reader got, "<EOF>" at end-of-file
  const pid_t reader = ::fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) {
    const int in = ::open(fifo.c_str(), O_RDONLY);
    const int out = ::open(heard.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    char buf[64];
    ssize_t n;
    while ((n = ::read(in, buf, sizeof buf)) > 0) (void)!::write(out, buf, static_cast<size_t>(n));
    (void)!::write(out, "<EOF>", 5);
    ::_exit(0);
  }
  std::string verdict = "not checked";
  for (int i = 0; i < 500 && !verdict.empty(); ++i) {  // until the reader has opened its end
    verdict = why_not_writable(fifo);
    if (!verdict.empty()) ::usleep(10000);
  }
  EXPECT_EQ(verdict, "");
  ::usleep(100000);  // a reader given end-of-file by the check would have said so by now
  if (verdict.empty()) write_file_atomic(fifo, "{\"a\": 1}\n", "--json fifo");
  std::string got;
  for (int i = 0; i < 100 && got != "{\"a\": 1}\n"; ++i) {
    ::usleep(20000);
    got = fs::exists(heard) ? read_all(heard) : "";
  }
  // The check's descriptor stays open until this process ends, so the reader waits on: killed.
  ::kill(reader, SIGKILL);
  ::waitpid(reader, nullptr, 0);
  EXPECT_EQ(got, "{\"a\": 1}\n") << "the reader heard something else (\"<EOF>\": the check ended its stream)";
}

}  // namespace
}  // namespace echo
