#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace echo {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  ECHO_RUN_CHECK(fd >= 0, "cannot open '{}' to sync it: {}", path, std::strerror(errno));
  try {
    fsync_fd(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void fsync_fd(int fd, const std::string& path) {
  ECHO_RUN_CHECK(::fsync(fd) == 0, "cannot sync '{}' to disk: {}", path, std::strerror(errno));
}

namespace {

void write_in_place(const std::string& path, std::string_view bytes, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  ECHO_RUN_CHECK(out.good(), "{}: cannot open for writing: {}", what, std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();  // NOTE: a full disk shows only when the buffer is written out
  ECHO_RUN_CHECK(!out.fail(), "{}: write failed: {}", what, std::strerror(errno));
}

void write_fd(int fd, std::string_view bytes, const std::string& what, const std::string& temp) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    ECHO_RUN_CHECK(n > 0, "{}: write failed ('{}'): {}", what, temp, n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    left -= static_cast<size_t>(n);
  }
}

mode_t umask_now() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

// A path through /dev or /proc (/dev/stdout, /dev/null, /proc/self/fd/1), taken lexically
// (absolute, normalized, links not followed), names an open stream or a device whatever it resolves
// to. NOTE: /dev/stdout redirected to a file resolves to that regular file, and renaming over it
// would drop what the program printed before and send what it prints after to the unlinked file.
bool writes_in_place(const std::string& path) {
  std::error_code error;
  const std::string lexical = fs::absolute(path, error).lexically_normal().string();
  if (lexical.rfind("/dev/", 0) == 0 || lexical.rfind("/proc/", 0) == 0) return true;
  const fs::file_status status = fs::status(path, error);  // follows links: a link to a FIFO too
  return fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status);
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what) {
  std::error_code error;
  fs::path target(path);
  const fs::file_status status = fs::status(target, error);  // follows links
  ECHO_INPUT_CHECK(!fs::is_directory(status), "{}: it is a directory; move it away", what);
  if (writes_in_place(path)) {
    write_in_place(path, bytes, what);
    return;
  }
  if (fs::is_symlink(fs::symlink_status(target, error))) {  // replace the file it names, not the link
    const fs::path resolved = fs::canonical(target, error);
    if (!error) target = resolved;
  }
  // The replaced file's mode is kept; a new file gets 0666 less the umask, as open(2) would.
  struct stat old {};
  const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~umask_now());
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // NOTE: a unique temp name (mkstemp): a user's own X.tmp is never touched, and two writers of one
  // target never write into each other's temp file.
  std::string temp = target.string() + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  ECHO_RUN_CHECK(fd >= 0, "{}: cannot create a temporary file beside it ('{}'): {}", what, temp,
                 std::strerror(errno));
  try {  // from here on the temp file is ours: a failure removes it
    write_fd(fd, bytes, what, temp);
    ECHO_RUN_CHECK(::fchmod(fd, mode) == 0, "{}: cannot set the mode of '{}': {}", what, temp, std::strerror(errno));
    fsync_fd(fd, temp);
    ECHO_RUN_CHECK(::close(fd) == 0, "{}: cannot close '{}': {}", what, temp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  fs::rename(temp, target, error);
  if (error) {
    ::unlink(temp.c_str());
    ECHO_RUN_FAIL("{}: cannot rename '{}' to '{}': {}", what, temp, target.string(), error.message());
  }
  fsync_path(dir.string(), true);
}

}  // namespace echo
