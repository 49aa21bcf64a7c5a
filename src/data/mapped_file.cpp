// MappedFile: open + fstat + mmap(PROT_READ), with errors that name the file.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "data/fault_names.h"

namespace echo::data {

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
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    // NOTE: MAP_POPULATE reads ahead what is not cached and maps all of it, so it is only for a
    // file about to be read whole; a random reader would pay for pages it never touches.
    const int flags = MAP_SHARED | (access == Access::whole_file ? MAP_POPULATE : 0);
    void* p = ::mmap(nullptr, file.size_, PROT_READ, flags, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      ECHO_RUN_FAIL("{}: cannot mmap {} bytes: {}", path, file.size_, std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
    // If the file shrinks later, a read past its new end faults: the handler names the file.
    register_mapping(file.data_, file.size_, path);
  }
  ::close(fd);  // the mapping keeps its own reference to the file
  return file;
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (data_ != nullptr) {
    unregister_mapping(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

}  // namespace echo::data
