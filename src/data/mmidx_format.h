// The byte layout of a Megatron-LM MMIDIDX index (.idx), shared by the writer and the reader.
// Layout (megatron/core/datasets/indexed_dataset.py, _IndexWriter / _IndexReader), little endian:
//   offset  0  char[9]  magic "MMIDIDX\0\0"
//   offset  9  u64      version, always 1
//   offset 17  u8       dtype code of the tokens in .bin (DType enum: 1 u8 ... 4 i32 ... 8 u16)
//   offset 18  u64      S = sequence count
//   offset 26  u64      D = document-index count (documents + 1: the list starts with 0 and ends with S)
//   offset 34  i32[S]   sequence lengths in tokens
//              i64[S]   sequence pointers: byte offset of each sequence in .bin
//              i64[D]   document indices: sequence index where each document starts, then S
//              (i8[S]   sequence modes, multimodal datasets only: ignored by echo)
// NOTE: the arrays start at byte 34, so they are not naturally aligned: read them with memcpy.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace echo::data::mmidx {

static_assert(std::endian::native == std::endian::little,
              "MMIDIDX files are little endian and .bin tokens are read in place through mmap");

inline constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr size_t kMagicBytes = sizeof(kMagic);
inline constexpr uint64_t kVersion = 1;
inline constexpr size_t kVersionOffset = 9;
inline constexpr size_t kDtypeOffset = 17;
inline constexpr size_t kSequenceCountOffset = 18;
inline constexpr size_t kDocumentCountOffset = 26;
inline constexpr size_t kHeaderBytes = 34;
inline constexpr size_t kBytesPerSequence = sizeof(int32_t) + sizeof(int64_t);  // length + pointer
inline constexpr size_t kBytesPerDocumentIndex = sizeof(int64_t);

template <class T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace echo::data::mmidx
