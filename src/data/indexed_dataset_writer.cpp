// IndexedDatasetWriter: streams int32 documents to prefix.bin.tmp, then writes the MMIDIDX index
// (data/mmidx_format.h) and renames both files into place.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset_meta.h"
#include "data/indexed_dataset.h"
#include "data/mmidx_format.h"
#include "data/prefix_lock.h"

namespace echo::data {
namespace {

std::string bin_tmp_path(const std::string& prefix) { return prefix + ".bin.tmp"; }
std::string idx_tmp_path(const std::string& prefix) { return prefix + ".idx.tmp"; }
// Where finalize() moves the sidecar of the data it replaces while it renames the .bin.
std::string meta_aside_path(const std::string& prefix) { return dataset_meta_path(prefix) + ".old"; }

void write_bytes(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes == 0) return;
  ECHO_RUN_CHECK(std::fwrite(data, 1, bytes, f) == bytes, "{}: write failed: {}", path, std::strerror(errno));
}

template <class T>
void write_le(std::FILE* f, T value, const std::string& path) {
  write_bytes(f, &value, sizeof value, path);  // little endian: mmidx_format.h asserts the host is
}

// Writes `count` int64 values produced by value(i), through a bounded buffer.
template <class F>
void write_i64_array(std::FILE* f, size_t count, F value, const std::string& path) {
  constexpr size_t kChunk = 1 << 16;
  std::vector<int64_t> buf;
  buf.reserve(std::min(count, kChunk));
  for (size_t i = 0; i < count; ++i) {
    buf.push_back(value(i));
    if (buf.size() == kChunk || i + 1 == count) {
      write_bytes(f, buf.data(), buf.size() * sizeof(int64_t), path);
      buf.clear();
    }
  }
}

// Flushes and syncs a file still being written, before it is closed and renamed into place.
void sync_open_file(std::FILE* f, const std::string& path) {
  ECHO_RUN_CHECK(std::fflush(f) == 0, "{}: write failed: {}", path, std::strerror(errno));
  fsync_fd(::fileno(f), path);
}

void close_checked(std::FILE* f, const std::string& path) {
  ECHO_RUN_CHECK(std::fclose(f) == 0, "{}: close failed: {}", path, std::strerror(errno));
}

}  // namespace

std::vector<std::string> IndexedDatasetWriter::files_written(const std::string& prefix) {
  return {
      prefix + ".bin",      prefix + ".idx",      dataset_meta_path(prefix),     meta_aside_path(prefix),
      bin_tmp_path(prefix), idx_tmp_path(prefix), dataset_meta_tmp_path(prefix), PrefixLock::path(prefix),
  };
}

std::vector<std::string> IndexedDatasetWriter::temporary_files(const std::string& prefix) {
  return {bin_tmp_path(prefix), idx_tmp_path(prefix), dataset_meta_tmp_path(prefix)};
}

void IndexedDatasetWriter::FileCloser::operator()(std::FILE* f) const {
  if (f != nullptr) std::fclose(f);
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix) : prefix_(std::move(prefix)) {
  ECHO_CHECK(!prefix_.empty(), "indexed dataset writer: empty path prefix");
  const std::string path = bin_tmp_path(prefix_);
  bin_.reset(create_fresh_file(path));
}

IndexedDatasetWriter::~IndexedDatasetWriter() { discard(); }

void IndexedDatasetWriter::discard() noexcept {
  if (finalized_) return;
  // Abandoned (or failed) writes leave nothing behind that a reader could mistake for data.
  bin_.reset();
  std::remove(bin_tmp_path(prefix_).c_str());
  std::remove(idx_tmp_path(prefix_).c_str());
  finalized_ = true;
}

IndexedDatasetWriter::IndexedDatasetWriter(IndexedDatasetWriter&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      bin_(std::move(other.bin_)),
      lengths_(std::move(other.lengths_)),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      finalized_(std::exchange(other.finalized_, true)) {}  // the moved-from writer owns no files

IndexedDatasetWriter& IndexedDatasetWriter::operator=(IndexedDatasetWriter&& other) noexcept {
  if (this != &other) {
    discard();
    prefix_ = std::move(other.prefix_);
    bin_ = std::move(other.bin_);
    lengths_ = std::move(other.lengths_);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    finalized_ = std::exchange(other.finalized_, true);
  }
  return *this;
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  ECHO_CHECK(!finalized_, "{}: add_document after finalize", prefix_);
  ECHO_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             "{}: document {} has {} tokens; the MMIDIDX format stores lengths as int32", prefix_, lengths_.size(),
             tokens.size());
  write_bytes(bin_.get(), tokens.data(), tokens.size_bytes(), bin_tmp_path(prefix_));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += tokens.size();
}

void IndexedDatasetWriter::finalize() {
  ECHO_CHECK(!finalized_, "{}: finalize called twice", prefix_);
  const std::string bin_tmp = bin_tmp_path(prefix_);
  const std::string idx_tmp = idx_tmp_path(prefix_);
  // NOTE: each file is synced before its rename and the directory after the renames (as the
  // checkpoint writer does): without it a power loss soon after could leave the new names on
  // disk with their data still unwritten (a .bin of zeros under a valid-looking .idx).
  sync_open_file(bin_.get(), bin_tmp);
  close_checked(bin_.release(), bin_tmp);

  std::unique_ptr<std::FILE, FileCloser> idx(create_fresh_file(idx_tmp));
  const uint64_t num_sequences = lengths_.size();
  write_bytes(idx.get(), mmidx::kMagic, mmidx::kMagicBytes, idx_tmp);
  write_le<uint64_t>(idx.get(), mmidx::kVersion, idx_tmp);
  write_le<uint8_t>(idx.get(), static_cast<uint8_t>(TokenDtype::kInt32), idx_tmp);
  write_le<uint64_t>(idx.get(), num_sequences, idx_tmp);
  write_le<uint64_t>(idx.get(), num_sequences + 1, idx_tmp);  // document indices: 0, 1, ..., S
  write_bytes(idx.get(), lengths_.data(), lengths_.size() * sizeof(int32_t), idx_tmp);
  int64_t pointer = 0;
  write_i64_array(
      idx.get(), lengths_.size(),
      [&](size_t i) {
        const int64_t p = pointer;
        pointer += static_cast<int64_t>(lengths_[i]) * static_cast<int64_t>(sizeof(int32_t));
        return p;
      },
      idx_tmp);
  write_i64_array(
      idx.get(), lengths_.size() + 1, [](size_t i) { return static_cast<int64_t>(i); }, idx_tmp);
  sync_open_file(idx.get(), idx_tmp);
  close_checked(idx.release(), idx_tmp);

  // A sidecar at this prefix describes the data being replaced: left beside the new data, its EOS
  // and tokenizer would be taken for the new data's (echo_prep writes the new one after this).
  // NOTE: the order keeps the sidecar with its data. It is first renamed aside (atomic, no
  // copy), so no moment has new data beside it; if the .bin rename then fails the old data is
  // untouched and the sidecar goes back, so it stays verified. Only once the new .bin is in place
  // is the old sidecar's data gone for good and the aside copy dropped. A crash between the steps
  // leaves at worst the old data unverified with PREFIX.meta.json.old beside it, never wrong.
  const std::string meta = dataset_meta_path(prefix_), meta_aside = meta_aside_path(prefix_);
  bool aside = std::rename(meta.c_str(), meta_aside.c_str()) == 0;
  ECHO_RUN_CHECK(aside || errno == ENOENT, "cannot move the old sidecar {} aside to {}: {}", meta, meta_aside,
                 std::strerror(errno));
  if (std::rename(bin_tmp.c_str(), (prefix_ + ".bin").c_str()) != 0) {
    const int err = errno;
    if (aside && std::rename(meta_aside.c_str(), meta.c_str()) != 0)
      ECHO_RUN_FAIL(
          "cannot rename {} to {}.bin: {}; and the old data's sidecar could not be put back from {} to {} "
          "({}): rename it back by hand",
          bin_tmp, prefix_, std::strerror(err), meta_aside, meta, std::strerror(errno));
    ECHO_RUN_FAIL("cannot rename {} to {}.bin: {}", bin_tmp, prefix_, std::strerror(err));
  }
  if (aside) std::remove(meta_aside.c_str());  // best effort: nothing reads a .old sidecar
  ECHO_RUN_CHECK(std::rename(idx_tmp.c_str(), (prefix_ + ".idx").c_str()) == 0,
                 "cannot rename {} to {}.idx: {}; {}.bin is already the new data's, so the dataset is unusable until "
                 "it is written again",
                 idx_tmp, prefix_, std::strerror(errno), prefix_);
  // NOTE: finalized before the directory's sync: both renames are done, so a failure there must
  // not make the destructor treat the new dataset as temporary files.
  finalized_ = true;
  const std::filesystem::path dir = std::filesystem::path(prefix_).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

}  // namespace echo::data
