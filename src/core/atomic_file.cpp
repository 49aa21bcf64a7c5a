#include "core/atomic_file.h"

#include <fcntl.h>
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

// `in_place`: `path` is the target itself (a device), named by `what` alone in the errors.
void write_stream(const std::string& path, std::string_view bytes, const std::string& what, bool in_place) {
  const std::string where = in_place ? "" : fmt::format(" ('{}')", path);
  std::ofstream out(path, std::ios::binary | (in_place ? std::ios::out : std::ios::trunc));
  ECHO_RUN_CHECK(out.good(), "{}: cannot open for writing{}: {}", what, where, std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();  // NOTE: a full disk shows only when the buffer is written out
  ECHO_RUN_CHECK(!out.fail(), "{}: write failed{}: {}", what, where, std::strerror(errno));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes, const std::string& what) {
  std::error_code error;
  fs::path target(path);
  const fs::file_status status = fs::status(target, error);  // follows links
  ECHO_INPUT_CHECK(!fs::is_directory(status), "{}: it is a directory; move it away", what);
  if (fs::exists(status) && !fs::is_regular_file(status)) {  // /dev/stdout, a FIFO: nothing to rename over
    write_stream(path, bytes, what, true);
    return;
  }
  if (fs::is_symlink(fs::symlink_status(target, error))) {  // replace the file it names, not the link
    const fs::path resolved = fs::canonical(target, error);
    if (!error) target = resolved;
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path temp(target.string() + ".tmp");
  const fs::file_status in_the_way = fs::symlink_status(temp, error);
  ECHO_INPUT_CHECK(!fs::exists(in_the_way) || fs::is_regular_file(in_the_way),
                   "{}: '{}' is in the way (not a regular file); move it away", what, temp.string());
  try {  // from here on the temp file is ours: a failure removes it
    write_stream(temp.string(), bytes, what, false);
    fsync_path(temp.string(), false);
    fs::rename(temp, target, error);
    ECHO_RUN_CHECK(!error, "{}: cannot rename '{}' to '{}': {}", what, temp.string(), target.string(),
                   error.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
  fsync_path(dir.string(), true);
}

}  // namespace echo
