#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

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

std::FILE* create_fresh_file(const std::string& path) {
  ECHO_RUN_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, "{}: cannot remove what is at this temporary name: {}",
                 path, std::strerror(errno));
  // O_EXCL: a name made again between the unlink and here (a link) fails instead of being followed.
  // 0666 less the umask, as fopen(path, "wb") made it (a group-writable dataset under umask 002).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  ECHO_RUN_CHECK(fd >= 0, "{}: cannot create: {}", path, std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    ECHO_RUN_FAIL("{}: cannot open for writing: {}", path, std::strerror(err));
  }
  return f;
}

namespace {

// `name`, when not empty, is the file written in place of the target (a temp file).
void write_fd(int fd, std::string_view bytes, const std::string& what, const std::string& name) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    ECHO_RUN_CHECK(n > 0, "{}: write failed{}: {}", what, name.empty() ? "" : " ('" + name + "')",
                   n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// N of "N" when it is a whole non-negative decimal number of at most 9 digits, else -1.
int descriptor_number(const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(text);
}

// The N of a lexical /dev/fd/N or /proc/<who>/fd/N (who: self, thread-self or a pid, returned in
// `who`), /dev/stdin|stdout|stderr; -1 for any other path.
int lexical_descriptor(const fs::path& lexical, std::string* who) {
  const std::string text = lexical.string();
  if (text == "/dev/stdin") return 0;
  if (text == "/dev/stdout") return 1;
  if (text == "/dev/stderr") return 2;
  std::vector<std::string> parts;
  for (const auto& part : lexical.relative_path()) parts.push_back(part.string());
  if (parts.size() == 3 && parts[0] == "dev" && parts[1] == "fd") return descriptor_number(parts[2]);
  if (parts.size() == 4 && parts[0] == "proc" && parts[2] == "fd") {
    *who = parts[1];
    return descriptor_number(parts[3]);
  }
  return -1;
}

bool same_object(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

mode_t umask_now() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

int own_descriptor_named(const std::string& path) {
  std::error_code error;
  const fs::path lexical = fs::absolute(path, error).lexically_normal();
  std::string who = "self";
  const int n = lexical_descriptor(lexical, &who);
  const bool ours = who == "self" || who == "thread-self" || who == std::to_string(::getpid());
  if (n >= 0 && ours) return ::fcntl(n, F_GETFD) >= 0 ? n : -1;
  // A link to /dev/stdout, or the file stdout is redirected to, is the same object as fd 1.
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) return -1;
  for (int fd : {1, 2}) {
    struct stat open {};
    if (::fstat(fd, &open) == 0 && same_object(target, open)) return fd;
  }
  return -1;
}

bool writes_in_place(const std::string& path) {
  if (own_descriptor_named(path) >= 0) return true;
  std::error_code error;
  std::string who;
  if (lexical_descriptor(fs::absolute(path, error).lexically_normal(), &who) >= 0) return true;
  const fs::file_status status = fs::status(path, error);  // follows links: a link to a FIFO too
  return fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status);
}

namespace {

constexpr int kReaderWaitSeconds = 3;

bool is_fifo(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// A stream target opened for appending without blocking in open(2): a FIFO no one reads fails
// with ENXIO instead of waiting for a reader that may never come, so it is tried again for
// kReaderWaitSeconds (`echo_eval --json p & cat p` starts its reader a moment later). Writes
// then block as usual. -1 with errno set on failure.
int open_stream(const std::string& path) {
  int fd = -1;
  for (int tries = 0; tries <= kReaderWaitSeconds * 50; ++tries) {
    fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0 || errno != ENXIO || !is_fifo(path)) break;
    ::usleep(20000);
  }
  if (fd < 0) return -1;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Why open_stream(path) failed with `err`: ENXIO also means a socket or a device without a driver.
std::string open_stream_error(const std::string& path, int err) {
  struct stat st {};
  if (err == ENXIO && ::stat(path.c_str(), &st) == 0) {
    if (S_ISFIFO(st.st_mode))
      return fmt::format("it is a FIFO that no one opened for reading within {} s (writing would wait for a reader)",
                         kReaderWaitSeconds);
    if (S_ISSOCK(st.st_mode)) return "it is a socket, which open(2) cannot write to";
  }
  return std::strerror(err);
}

}  // namespace

StreamOutput::StreamOutput(const std::string& path, std::string what) : what_(std::move(what)) {
  fd_ = own_descriptor_named(path);
  if (fd_ >= 0) return;
  fd_ = open_stream(path);
  ECHO_RUN_CHECK(fd_ >= 0, "{}: cannot open for writing: {}", what_, open_stream_error(path, errno));
  owned_ = true;
}

StreamOutput::~StreamOutput() {
  if (owned_) ::close(fd_);
}

void StreamOutput::write(std::string_view bytes) {
  if (!owned_) std::fflush(nullptr);  // what the program printed so far comes first
  write_fd(fd_, bytes, what_, "");  // `what` names the target
}

namespace {

// The file write_file_atomic replaces: the one a symbolic link names, not the link, also when that
// file does not exist yet (a dangling link: the file is made where it points, as `>` in a shell
// would, instead of the link being replaced by a file). A chain of links is followed as the kernel
// would, up to its 40 hops; a loop gives back a link (why_not_writable names it).
fs::path replaced_file(const fs::path& path) {
  fs::path at = path;
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(at, error))) return at;
    const fs::path next = fs::read_symlink(at, error);
    if (error) return at;
    at = next.is_absolute() ? next : (at.has_parent_path() ? at.parent_path() / next : next);
  }
  return at;
}

// A name of a folder's form: ending in '/', '.' or '..' ("out.json/" once got "its folder
// 'out.json' does not exist").
bool names_a_folder(const fs::path& path) {
  const fs::path last = path.filename();
  return last.empty() || last == "." || last == "..";
}

// The folder write_file_atomic makes its temp file in.
fs::path folder_of(const fs::path& target) { return target.has_parent_path() ? target.parent_path() : fs::path("."); }

// The file a write of `path` (not written in place) replaces, through replaced_file, or why no
// file can be: a name of a folder's form, a link loop, a link to a folder's name. Refused alike by
// why_not_writable and write_file_atomic (which otherwise renamed over one link of a loop).
std::string why_no_file(const fs::path& path, fs::path& target) {
  if (names_a_folder(path)) return "the name ends as a folder's does ('/', '.' or '..'), not as a file's";
  target = replaced_file(path);
  std::error_code error;
  if (fs::is_symlink(fs::symlink_status(target, error)))
    return fmt::format("it is a symbolic link that leads round in a loop (at '{}')", target.string());
  if (names_a_folder(target)) return fmt::format("it is a symbolic link to '{}', a folder's name", target.string());
  return {};
}

}  // namespace

std::string why_not_writable(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(fs::status(path, error))) return "it is a directory";
  if (writes_in_place(path)) {
    if (own_descriptor_named(path) >= 0) return {};
    const int fd = open_stream(path);
    if (fd >= 0) {
      struct stat st {};
      // NOTE: a FIFO's descriptor is kept open until the process ends: closing the only writer
      // would give its reader (a `cat`) end-of-file now, and the result would find no one later.
      if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) ::close(fd);
      return {};
    }
    return fmt::format("cannot open it for writing: {}", open_stream_error(path, errno));
  }
  fs::path target;
  if (std::string why = why_no_file(path, target); !why.empty()) return why;
  const fs::path dir = folder_of(target);
  // A link's target may sit in another folder than the name the user gave: say whose folder it is.
  const std::string folder_name = target == fs::path(path) ? fmt::format("its folder '{}'", dir.string())
                                                           : fmt::format("the folder '{}' of its link's target '{}'",
                                                                         dir.string(), target.string());
  const fs::file_status folder = fs::status(dir, error);
  if (folder.type() == fs::file_type::not_found) return fmt::format("{} does not exist", folder_name);
  if (error) return fmt::format("cannot reach {}: {}", folder_name, error.message());  // a loop in the folder's path
  if (!fs::is_directory(folder)) return fmt::format("{} is not a folder", folder_name);
  // The temp file beside the target needs write and search permission (and a file system that is
  // not read-only: access(2) reports EROFS).
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fmt::format("{} is not writable: {}", folder_name, std::strerror(errno));
  return {};
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what) {
  std::error_code error;
  fs::path target(path);
  const fs::file_status status = fs::status(target, error);  // follows links
  ECHO_INPUT_CHECK(!fs::is_directory(status), "{}: it is a directory; move it away", what);
  if (writes_in_place(path)) {
    StreamOutput(path, what).write(bytes);
    return;
  }
  if (const std::string why = why_no_file(fs::path(path), target); !why.empty()) ECHO_INPUT_FAIL("{}: {}", what, why);
  // The replaced file's mode is kept; a new file gets 0666 less the umask, as open(2) would.
  struct stat old {};
  const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~umask_now());
  const fs::path dir = folder_of(target);
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
