// The lock a dataset writer holds on its output prefix (docs/design.md, "Data").
#pragma once

#include <string>

namespace echo::data {

// An exclusive advisory lock (flock) on PREFIX.lock, held from before a dataset's first temporary
// file is created until its sidecar is in place. Two echo_prep runs on one prefix both wrote
// PREFIX.bin.tmp (the second truncating the first's) and each renamed it into place: tokens of
// both in one .bin under one run's index. Now the second is refused in words. The file is removed
// when the lock is released; a killed writer leaves it behind unlocked, which the next one reuses.
// A link or a non-regular file at the name is refused, never followed.
class PrefixLock {
 public:
  // InputError naming the prefix when another process holds the lock.
  explicit PrefixLock(const std::string& prefix);
  ~PrefixLock();
  PrefixLock(const PrefixLock&) = delete;
  PrefixLock& operator=(const PrefixLock&) = delete;

  static std::string path(const std::string& prefix) { return prefix + ".lock"; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace echo::data
