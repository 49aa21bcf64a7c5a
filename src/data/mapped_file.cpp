// MappedFile: open + fstat + mmap(PROT_READ), with errors that name the file.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "data/fault_names.h"

namespace echo::data {
namespace {

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + static_cast<int64_t>(st.st_mtim.tv_nsec);
}

}  // namespace

MappedFile MappedFile::open(const std::string& path, Access access) {
  // NOTE: O_NONBLOCK so that a FIFO reaches the regular-file check below instead of blocking in
  // open() until some writer appears; it changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) ECHO_INPUT_FAIL("{}: no such file", path);
    ECHO_INPUT_FAIL("{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    ECHO_RUN_FAIL("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ECHO_INPUT_FAIL("{}: not a regular file", path);
  }
  MappedFile file;
  file.fd_ = fd;  // owned by `file` from here: its destructor closes it on every path below
  file.mtime_ns_ = mtime_ns(st);
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    // NOTE: MAP_POPULATE reads ahead what is not cached and maps all of it, so it is only for a
    // file about to be read whole; a random reader would pay for pages it never touches.
    const int flags = MAP_SHARED | (access == Access::whole_file ? MAP_POPULATE : 0);
    void* p = ::mmap(nullptr, file.size_, PROT_READ, flags, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ECHO_RUN_FAIL("{}: cannot mmap {} bytes: {}", path, file.size_, std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
    // If the file shrinks later, a read past its new end faults: the handler names the file.
    register_mapping(file.data_, file.size_, path);
  }
  return file;
}

std::string MappedFile::change_since_open() const {
  if (fd_ < 0) return "";
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return fmt::format("it cannot be looked at any more: {}", std::strerror(errno));
  const int64_t now_ns = mtime_ns(st);
  const bool resized = static_cast<uint64_t>(st.st_size) != size_;
  if (now_ns == mtime_ns_ && !resized) return "";
  std::tm utc{};
  const std::time_t sec = st.st_mtim.tv_sec;
  gmtime_r(&sec, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::string why = fmt::format("it was modified at {}", when);
  if (resized) why += fmt::format(", and its size went from {} to {} bytes", size_, st.st_size);
  return why;
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      mtime_ns_(other.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    mtime_ns_ = other.mtime_ns_;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) {
    unregister_mapping(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace echo::data
