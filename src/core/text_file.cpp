// core/text_file.h with POSIX open/fstat/read: the file type and size come from the descriptor
// that is read, so what is checked is what is read.
#include "core/text_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace echo {
namespace {

// Closes the descriptor on every return path.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

std::string too_large(std::size_t max_bytes) { return fmt::format("it is larger than {} bytes", max_bytes); }

}  // namespace

std::optional<std::string> try_read_text_file(const std::string& path, std::string& why, std::size_t max_bytes) {
  // NOTE: O_NONBLOCK so that a FIFO is refused below instead of blocking in open() until some
  // writer appears; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    // A dangling symbolic link read "No such file or directory", as if nothing were there.
    const std::string link_problem = error == ENOENT || error == ELOOP ? why_unresolvable(path) : "";
    why = link_problem.empty() ? std::strerror(error) : link_problem;
    return std::nullopt;
  }
  const FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  if (S_ISDIR(st.st_mode)) {
    why = "it is a directory";
    return std::nullopt;
  }
  // A FIFO would wait for a writer, /dev/zero never ends: only regular files are read.
  if (!S_ISREG(st.st_mode)) {
    why = "it is not a regular file";
    return std::nullopt;
  }
  // The size is known up front; a /proc file says 0 and is read until its end, bounded all the
  // same.
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    why = too_large(max_bytes);
    return std::nullopt;
  }
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0) {
      why = std::strerror(errno);
      return std::nullopt;
    }
    if (got == 0) break;
    if (static_cast<std::size_t>(got) > max_bytes - text.size()) {  // grew while read, or a /proc file
      why = too_large(max_bytes);
      return std::nullopt;
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
  return text;
}

std::string read_text_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  std::string why;
  std::optional<std::string> text = try_read_text_file(path, why, max_bytes);
  ECHO_INPUT_CHECK(text.has_value(), "cannot read {}: {}", what, why);
  return std::move(*text);
}

bool is_absent(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

std::string why_unresolvable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return "";
  const int error = errno;
  if (error == ELOOP) return "it is a symbolic-link loop (too many levels of symbolic links)";
  if (error == ENOENT && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0) return "it is a symbolic link to something that does not exist";
    target.resize(static_cast<std::size_t>(n));
    return fmt::format("it is a symbolic link to '{}', which does not exist", target);
  }
  return std::strerror(error);
}

void require_resolvable(const std::string& path, const std::string& subject, const std::string& absent_hint) {
  ECHO_INPUT_CHECK(!is_absent(path), "{} does not exist{}", subject, absent_hint);
  const std::string unresolvable = why_unresolvable(path);
  ECHO_INPUT_CHECK(unresolvable.empty(), "{} cannot be resolved: {}", subject, unresolvable);
}

}  // namespace echo
