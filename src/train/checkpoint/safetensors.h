// The safetensors file format (Hugging Face): an 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}},
// then the raw little-endian data, offsets relative to the byte after the header. The reader
// maps the file and validates it whole before anything is read; the writer streams tensors into
// a header it writes first, so a full model never has to sit in memory at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/mapped_file.h"

namespace echo::train {

// Every dtype the format names, so a valid file with integer tensors still opens; only the
// floating ones convert to fp32.
enum class StDtype : uint8_t { boolean, u8, i8, f8_e4m3, f8_e5m2, i16, u16, f16, bf16, i32, u32, f32, i64, u64, f64 };

std::string_view st_dtype_name(StDtype dtype);  // "F32", "BF16", ...
size_t st_dtype_size(StDtype dtype);
// Throws echo::Error for a name the format does not define.
StDtype parse_st_dtype(std::string_view name);

// "[2, 3]"
std::string format_shape(std::span<const int64_t> shape);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;
};

using StMetadata = std::map<std::string, std::string>;

// A safetensors file, memory-mapped read-only and validated on open: the header length lies
// within the file, the header is a JSON object of well-formed entries with known dtypes, each
// entry's shape × dtype size equals its offsets span, offsets lie within the data section and no
// two tensors overlap. Every error names the file (and the tensor).
class SafetensorsFile {
 public:
  // Movable, not copyable (the mapping is owned). Throws echo::Error naming the file. `access`:
  // whole_file when every byte is about to be read once (checksums), see data::MappedFile.
  explicit SafetensorsFile(const std::string& path, data::MappedFile::Access access = data::MappedFile::Access::random);

  const std::string& path() const { return path_; }
  const StMetadata& metadata() const { return metadata_; }
  // Tensor names in data order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws echo::Error naming the file and the tensor when it is absent.
  const StTensorInfo& info(const std::string& name) const;
  // The tensor's raw little-endian bytes.
  std::span<const std::byte> bytes(const std::string& name) const;
  // The 8-byte header length and the JSON header: every byte before the data section.
  std::span<const std::byte> header_bytes() const {
    return {reinterpret_cast<const std::byte*>(file_.data()), static_cast<size_t>(data_begin_)};
  }

  // Elements [offset, offset + out.size()) of the flattened tensor, converted to fp32 (F32, F16,
  // BF16, F64; other dtypes are an error naming the tensor).
  void read_f32(const std::string& name, int64_t offset, std::span<float> out) const;
  std::vector<float> read_f32(const std::string& name) const;

 private:
  // Start of the data section.
  const std::byte* data() const { return reinterpret_cast<const std::byte*>(file_.data()) + data_begin_; }

  std::string path_;
  data::MappedFile file_;
  uint64_t data_begin_ = 0;  // offset of the data section: 8 + header length
  StMetadata metadata_;
  std::vector<StTensorInfo> tensors_;  // data order
  std::map<std::string, size_t> index_;
};

struct StTensorSpec {
  std::string name;
  StDtype dtype = StDtype::f32;
  std::vector<int64_t> shape;
};

// Writes a safetensors file in pieces. The constructor lays the tensors out back to back in the
// given order and writes the header (compact JSON, "__metadata__" first when given, then the
// tensors in order, padded with spaces to a multiple of 8 bytes as the reference implementation
// does); write() puts elements anywhere in any tensor; close() checks that every element was
// written once, syncs the file to disk and closes it. A writer destroyed without close() leaves
// a partial file behind (callers write into a temporary directory).
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<StTensorSpec> tensors, const StMetadata& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  size_t num_tensors() const { return tensors_.size(); }
  // Elements [offset, offset + values.size()) of tensor `tensor_idx`, converted from fp32 to its
  // dtype (F32, F16 and BF16 with round-to-nearest-even, F64).
  void write(size_t tensor_idx, int64_t offset, std::span<const float> values);
  void close();

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<StTensorInfo> tensors_;
  std::vector<int64_t> written_;  // elements written per tensor
};

// Whole-file convenience: tensors[i] takes values[i] (numel elements each).
void write_safetensors(const std::string& path, const std::vector<StTensorSpec>& tensors,
                       const std::vector<std::span<const float>>& values, const StMetadata& metadata = {});

}  // namespace echo::train
