#include "data/prefix_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace echo::data {

PrefixLock::PrefixLock(const std::string& prefix) : path_(path(prefix)) {
  // NOTE: O_RDWR, as RunDirLock opens its file: NFS and CIFS take an exclusive flock only on a
  // descriptor open for writing. The holder unlinks the file when it is done. A process that
  // opened the old file just before may then lock an inode no longer at the name, so the lock
  // counts only once the name still leads to the locked file; otherwise the open is retried.
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    ECHO_INPUT_CHECK(fd >= 0 || errno != ELOOP,
                     "the dataset's lock file {} is a symbolic link: echo_prep locks the file at that name and follows "
                     "no link; remove it",
                     path_);
    ECHO_RUN_CHECK(fd >= 0, "cannot create the dataset's lock file {}: {}", path_, std::strerror(errno));
    struct stat held {};
    if (::fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
      ::close(fd);
      ECHO_INPUT_FAIL("the dataset's lock file {} is not a regular file; remove it", path_);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        // A file system without locks (some NFS setups) must not stop every run.
        ECHO_WARN("prep", "cannot lock {} ({}): another echo_prep writing the same prefix would not be noticed", path_,
                  std::strerror(err));
        fd_ = fd;
        return;
      }
      ::close(fd);
      ECHO_INPUT_FAIL(
          "another process is writing the dataset '{}' (it holds the lock on {}): two writers of one prefix would mix "
          "their tokens in one .bin; wait for it to end, or write another prefix",
          prefix, path_);
    }
    struct stat named {};
    if (::stat(path_.c_str(), &named) == 0 && named.st_dev == held.st_dev && named.st_ino == held.st_ino) {
      fd_ = fd;
      return;
    }
    ::close(fd);
  }
  ECHO_RUN_FAIL("cannot take the lock on {}: the file was replaced 64 times while locking it", path_);
}

PrefixLock::~PrefixLock() {
  if (fd_ < 0) return;
  // Unlinked while still locked, so no one locks the old file and then finds it gone (see above).
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace echo::data
