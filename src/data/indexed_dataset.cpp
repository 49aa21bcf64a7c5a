// IndexedDataset: maps prefix.idx and prefix.bin, validates the MMIDIDX index (data/mmidx_format.h)
// against the .bin, and keeps the per-document token offsets; the tokens stay in the mapping.
#include "data/indexed_dataset.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "data/mmidx_format.h"

namespace echo::data {
namespace {

// 34 + 12*S + 8*D as text; the counts come from an untrusted header, so it may exceed 64 bits.
std::string index_bytes_text(uint64_t num_sequences, uint64_t num_doc_indices) {
  const unsigned __int128 bytes = static_cast<unsigned __int128>(mmidx::kHeaderBytes) +
                                  static_cast<unsigned __int128>(num_sequences) * mmidx::kBytesPerSequence +
                                  static_cast<unsigned __int128>(num_doc_indices) * mmidx::kBytesPerDocumentIndex;
  if (bytes > std::numeric_limits<uint64_t>::max()) return "more than 2^64";
  return std::to_string(static_cast<uint64_t>(bytes));
}

}  // namespace

const char* token_dtype_name(uint8_t code) {
  switch (code) {
    case 1:
      return "uint8";
    case 2:
      return "int8";
    case 3:
      return "int16";
    case 4:
      return "int32";
    case 5:
      return "int64";
    case 6:
      return "float64";
    case 7:
      return "float32";
    case 8:
      return "uint16";
    default:
      return "unknown";
  }
}

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  ECHO_INPUT_CHECK(!prefix.empty(), "indexed dataset: empty path prefix");
  IndexedDataset ds;
  ds.prefix_ = prefix;

  // NOTE: the index is parsed once and unmapped when open() returns; only the document offsets
  // are kept (8 bytes per document). The .bin stays mapped for the dataset's lifetime.
  const MappedFile idx = MappedFile::open(prefix + ".idx");
  const std::string& ip = idx.path();
  const uint8_t* d = idx.data();
  const size_t size = idx.size();

  // ---- header ----
  ECHO_INPUT_CHECK(size >= mmidx::kMagicBytes && std::memcmp(d, mmidx::kMagic, mmidx::kMagicBytes) == 0,
                   "{}: bad magic: not a Megatron-LM MMIDIDX index (expected the 9 bytes \"MMIDIDX\\0\\0\")", ip);
  ECHO_INPUT_CHECK(size >= mmidx::kHeaderBytes, "{}: truncated header: {} bytes, the MMIDIDX header has {}", ip, size,
                   mmidx::kHeaderBytes);
  const uint64_t version = mmidx::load<uint64_t>(d + mmidx::kVersionOffset);
  ECHO_INPUT_CHECK(version == mmidx::kVersion, "{}: unsupported version {} (expected {})", ip, version,
                   mmidx::kVersion);
  const uint8_t code = d[mmidx::kDtypeOffset];
  ECHO_INPUT_CHECK(
      code == static_cast<uint8_t>(TokenDtype::kInt32) || code == static_cast<uint8_t>(TokenDtype::kUint16),
      "{}: unsupported dtype code {} ({}); echo reads token ids stored as int32 (4) or uint16 (8)", ip, code,
      token_dtype_name(code));
  ds.dtype_ = static_cast<TokenDtype>(code);
  const uint64_t num_sequences = mmidx::load<uint64_t>(d + mmidx::kSequenceCountOffset);
  const uint64_t num_doc_indices = mmidx::load<uint64_t>(d + mmidx::kDocumentCountOffset);
  ECHO_INPUT_CHECK(
      num_doc_indices >= 1,
      "{}: the header has 0 document indices; Megatron's list starts with 0 and ends with the sequence count", ip);
  const uint64_t body = size - mmidx::kHeaderBytes;
  const bool fits =
      num_sequences <= body / mmidx::kBytesPerSequence &&
      num_doc_indices <= (body - num_sequences * mmidx::kBytesPerSequence) / mmidx::kBytesPerDocumentIndex;
  ECHO_INPUT_CHECK(fits,
                   "{}: truncated index: the header promises {} sequences and {} document indices ({} bytes), the file "
                   "has {} bytes",
                   ip, num_sequences, num_doc_indices, index_bytes_text(num_sequences, num_doc_indices), size);
  ds.num_sequences_ = num_sequences;

  // ---- sequences: lengths >= 0, stored back to back from byte 0 ----
  const uint8_t* lengths = d + mmidx::kHeaderBytes;
  const uint8_t* pointers = lengths + num_sequences * sizeof(int32_t);
  const uint8_t* doc_indices = pointers + num_sequences * sizeof(int64_t);
  const uint64_t item = bytes_per_token(ds.dtype_);
  // NOTE: echo requires contiguous sequences (what every Megatron writer produces): the .bin is
  // then one flat token array, a document is a single span, and tokens are naturally aligned.
  uint64_t end_byte = 0;
  for (uint64_t j = 0; j < num_sequences; ++j) {
    const int32_t length = mmidx::load<int32_t>(lengths + j * sizeof(int32_t));
    const int64_t pointer = mmidx::load<int64_t>(pointers + j * sizeof(int64_t));
    ECHO_INPUT_CHECK(length >= 0, "{}: sequence {} has negative length {}", ip, j, length);
    ECHO_INPUT_CHECK(
        pointer >= 0 && static_cast<uint64_t>(pointer) == end_byte,
        "{}: pointers out of order: sequence {} starts at byte {}, expected {} (the end of the sequence before "
        "it; sequences are stored back to back from byte 0)",
        ip, j, pointer, end_byte);
    end_byte += static_cast<uint64_t>(length) * item;
  }
  const uint64_t num_tokens = end_byte / item;

  // ---- documents: indices 0 = i_0 <= i_1 <= ... <= i_last = S ----
  auto sequence_token_offset = [&](uint64_t s) {
    return s == num_sequences ? num_tokens
                              : static_cast<uint64_t>(mmidx::load<int64_t>(pointers + s * sizeof(int64_t))) / item;
  };
  ds.doc_offsets_.clear();
  ds.doc_offsets_.reserve(num_doc_indices);
  int64_t previous = 0;
  for (uint64_t k = 0; k < num_doc_indices; ++k) {
    const int64_t s = mmidx::load<int64_t>(doc_indices + k * sizeof(int64_t));
    if (k == 0) ECHO_INPUT_CHECK(s == 0, "{}: the first document index is {}, expected 0", ip, s);
    ECHO_INPUT_CHECK(s >= previous && static_cast<uint64_t>(s) <= num_sequences,
                     "{}: document indices out of order: entry {} is {} after {} ({} sequences)", ip, k, s, previous,
                     num_sequences);
    ds.doc_offsets_.push_back(sequence_token_offset(static_cast<uint64_t>(s)));
    previous = s;
  }
  ECHO_INPUT_CHECK(static_cast<uint64_t>(previous) == num_sequences,
                   "{}: the last document index is {}, expected the sequence count {}", ip, previous, num_sequences);

  // ---- the tokens ----
  ds.bin_ = MappedFile::open(prefix + ".bin");
  ECHO_INPUT_CHECK(ds.bin_.size() >= end_byte, "{}: truncated: {} says {} {} tokens ({} bytes), the file has {} bytes",
                   ds.bin_.path(), ip, num_tokens, token_dtype_name(code), end_byte, ds.bin_.size());
  // Writers (echo_prep, Megatron-LM) store exactly the indexed tokens: bytes past them mean an index
  // that does not describe this .bin (another run's pair, or a wrong dtype read as the wrong width).
  ECHO_INPUT_CHECK(ds.bin_.size() == end_byte,
                   "{}: {} bytes, but {} says {} {} tokens ({} bytes): the .bin and .idx do not belong together "
                   "(mixed up files, or the index names the wrong dtype)",
                   ds.bin_.path(), ds.bin_.size(), ip, num_tokens, token_dtype_name(code), end_byte);
  return ds;
}

size_t IndexedDataset::document_length(size_t i) const {
  ECHO_CHECK(i < num_documents(), "{}: document {} out of range ({} documents)", prefix_, i, num_documents());
  return static_cast<size_t>(doc_offsets_[i + 1] - doc_offsets_[i]);
}

std::span<const int32_t> IndexedDataset::document(size_t i) const {
  ECHO_CHECK(dtype_ == TokenDtype::kInt32, "{}: document() reads int32 tokens, the dataset holds {}", prefix_,
             token_dtype_name(static_cast<uint8_t>(dtype_)));
  const size_t length = document_length(i);
  return {reinterpret_cast<const int32_t*>(bin_.data()) + doc_offsets_[i], length};
}

std::span<const uint16_t> IndexedDataset::document_u16(size_t i) const {
  ECHO_CHECK(dtype_ == TokenDtype::kUint16, "{}: document_u16() reads uint16 tokens, the dataset holds {}", prefix_,
             token_dtype_name(static_cast<uint8_t>(dtype_)));
  const size_t length = document_length(i);
  return {reinterpret_cast<const uint16_t*>(bin_.data()) + doc_offsets_[i], length};
}

std::span<const uint8_t> IndexedDataset::token_bytes() const {
  return {bin_.data(), num_tokens() * bytes_per_token(dtype_)};
}

void IndexedDataset::copy_tokens(uint64_t first, size_t count, int32_t* out) const {
  ECHO_CHECK(first <= num_tokens() && count <= num_tokens() - first, "{}: tokens [{}, {}) out of range ({} tokens)",
             prefix_, first, first + count, num_tokens());
  if (count == 0) return;
  if (dtype_ == TokenDtype::kInt32) {
    std::memcpy(out, reinterpret_cast<const int32_t*>(bin_.data()) + first, count * sizeof(int32_t));
  } else {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(bin_.data()) + first;
    for (size_t i = 0; i < count; ++i) out[i] = src[i];
  }
}

}  // namespace echo::data
