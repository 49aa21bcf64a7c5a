// A read-only memory map of one whole file (RAII: munmap in the destructor; movable, not
// copyable). The indexed dataset maps its .idx and .bin through it. While mapped, a file that is
// truncated under the process makes the faulting read print the file's name and exit (see
// data/fault_names.h) instead of dying of a bare SIGBUS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace echo::data {

class MappedFile {
 public:
  // How the mapping will be read. random: pages are mapped as they are touched, which suits the
  // training loader's scattered sample reads. whole_file: read once from start to end (checksum
  // hashing); the pages are mapped while opening (MAP_POPULATE), one kernel pass instead of a
  // page fault per folio during the read.
  enum class Access { random, whole_file };

  // Maps `path` read-only. Throws echo::Error "<path>: no such file" when it is missing, and
  // "<path>: ..." with the reason for any other failure (not a regular file, permission, mmap).
  static MappedFile open(const std::string& path, Access access = Access::random);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // NOTE: an empty file has size 0 and data() == nullptr (mmap cannot map zero bytes).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // How the mapped file changed since open(), in a few words ("it was modified at 2026-12-02
  // 16:30:05 UTC, and its size went from 40 to 48 bytes"), or "" when its size and modification
  // time are still the ones seen then. One fstat of the file kept open: cheap enough for every
  // batch. NOTE: the mapping is MAP_SHARED, so a file rewritten in place (cp over it keeps the
  // inode) changes the bytes read; a file replaced by a rename is not this one and changes nothing.
  std::string change_since_open() const;

 private:
  void reset() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;               // kept open for change_since_open()
  int64_t mtime_ns_ = 0;      // st_mtim at open
};

}  // namespace echo::data
