// Megatron-LM indexed datasets (docs/design.md §14): prefix.idx (MMIDIDX index, layout in
// data/mmidx_format.h) + prefix.bin (the tokens). The writer makes int32 datasets, one sequence
// per document; the reader memory-maps int32 and uint16 datasets written by echo or Megatron.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/mapped_file.h"

namespace echo::data {

// Megatron's DType codes. echo reads kInt32 and kUint16 (token ids) and writes kInt32.
enum class TokenDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// "int32", "uint16", ... or "unknown" for a code outside the table.
const char* token_dtype_name(uint8_t code);

// Bytes per stored token of the two dtypes echo reads (kInt32, kUint16).
inline size_t bytes_per_token(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? sizeof(uint16_t) : sizeof(int32_t);
}

// Writes prefix.bin.tmp and prefix.idx.tmp; finalize() writes the index and renames both (the
// .bin first, the .idx last, so a reader that finds the new .idx also finds its .bin). A sidecar
// PREFIX.meta.json of the data it replaces (data/dataset_meta.h) is moved aside before and
// dropped after the .bin rename, and put back if that rename fails: never beside new data, and
// kept with old data that stays. A writer destroyed before finalize() removes its temporary files.
class IndexedDatasetWriter {
 public:
  // Every file that writing a dataset at `prefix` creates, truncates, replaces or removes: PREFIX.bin,
  // .idx and .meta.json, the temporary and set-aside names on the way there (this writer's and
  // write_dataset_meta's), and echo_prep's PREFIX.lock. echo_prep refuses inputs that are any of them.
  static std::vector<std::string> files_written(const std::string& prefix);
  // Those of them that hold unfinished data (PREFIX.bin.tmp, .idx.tmp, .meta.json.tmp): what an
  // interrupted writer removes.
  static std::vector<std::string> temporary_files(const std::string& prefix);

  explicit IndexedDatasetWriter(std::string prefix);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(IndexedDatasetWriter&&) noexcept;
  IndexedDatasetWriter& operator=(IndexedDatasetWriter&&) noexcept;
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document = one sequence; an empty document is allowed (the loader still packs its EOS).
  void add_document(std::span<const int32_t> tokens);
  void finalize();

  size_t num_documents() const { return lengths_.size(); }
  size_t num_tokens() const { return num_tokens_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const;
  };
  void discard() noexcept;  // closes and removes the temporary files unless finalized

  std::string prefix_;
  std::unique_ptr<std::FILE, FileCloser> bin_;
  std::vector<int32_t> lengths_;
  size_t num_tokens_ = 0;
  bool finalized_ = false;
};

class IndexedDataset {
 public:
  // Maps prefix.idx and prefix.bin and validates the index against the .bin. Throws echo::Error
  // naming the file and the problem: missing file, bad magic, unsupported version or dtype,
  // truncated index, .bin shorter than the index says, pointers out of order.
  static IndexedDataset open(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  const std::string& bin_path() const { return bin_.path(); }
  TokenDtype dtype() const { return dtype_; }
  // How the .bin changed since open() (MappedFile::change_since_open), or "". The index is read
  // into memory at open, so only the .bin's tokens can change under a reader.
  std::string bin_change_since_open() const { return bin_.change_since_open(); }

  // Megatron documents: a document is the run of sequences between two document indices
  // (echo's writer makes one sequence per document). Documents are contiguous in .bin.
  size_t num_documents() const { return doc_offsets_.size() - 1; }
  size_t num_sequences() const { return num_sequences_; }
  size_t num_tokens() const { return static_cast<size_t>(doc_offsets_.back()); }
  size_t document_length(size_t i) const;
  // Token offset of each document in the flat token array, then num_tokens(): num_documents()+1
  // non-decreasing entries starting at 0.
  std::span<const uint64_t> document_offsets() const { return doc_offsets_; }

  // The tokens of document i, in place in the mapping. Each throws unless the dataset has that dtype.
  std::span<const int32_t> document(size_t i) const;
  std::span<const uint16_t> document_u16(size_t i) const;

  // The flat token array as stored (num_tokens() ids of dtype()), in place in the mapping.
  std::span<const uint8_t> token_bytes() const;

  // Copies tokens [first, first + count) of the flat token array (all documents back to back)
  // as int32, whatever the stored dtype.
  void copy_tokens(uint64_t first, size_t count, int32_t* out) const;

 private:
  IndexedDataset() = default;

  std::string prefix_;
  MappedFile bin_;
  TokenDtype dtype_ = TokenDtype::kInt32;
  size_t num_sequences_ = 0;
  std::vector<uint64_t> doc_offsets_{0};  // (num_documents + 1)
};

}  // namespace echo::data
