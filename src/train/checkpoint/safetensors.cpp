// safetensors reading (mmap + validation) and streaming writing.
#include "train/checkpoint/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "core/json_guard.h"
#include "core/text_file.h"

namespace echo::train {

// NOTE: the format is little-endian and data is copied to and from memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::string_view kMetadataKey = "__metadata__";

struct DtypeRow {
  StDtype dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DtypeRow, 15> kDtypes{{{StDtype::boolean, "BOOL", 1},
                                            {StDtype::u8, "U8", 1},
                                            {StDtype::i8, "I8", 1},
                                            {StDtype::f8_e4m3, "F8_E4M3", 1},
                                            {StDtype::f8_e5m2, "F8_E5M2", 1},
                                            {StDtype::i16, "I16", 2},
                                            {StDtype::u16, "U16", 2},
                                            {StDtype::f16, "F16", 2},
                                            {StDtype::bf16, "BF16", 2},
                                            {StDtype::i32, "I32", 4},
                                            {StDtype::u32, "U32", 4},
                                            {StDtype::f32, "F32", 4},
                                            {StDtype::i64, "I64", 8},
                                            {StDtype::u64, "U64", 8},
                                            {StDtype::f64, "F64", 8}}};

const DtypeRow& dtype_row(StDtype dtype) {
  for (const auto& row : kDtypes)
    if (row.dtype == dtype) return row;
  ECHO_FAIL("invalid safetensors dtype value {}", static_cast<int>(dtype));
}

std::string sys_error() { return std::strerror(errno); }

// a * b, or nullopt-like false on uint64 overflow.
bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  out = a * b;
  return true;
}

void write_all(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    // NOTE: a full disk says what to do: a save needs room for one more checkpoint beside the
    // ones kept, so a resume that changes nothing fails the same way at its next save.
    const bool full = n < 0 && errno == ENOSPC;
    ECHO_RUN_CHECK(n > 0, "writing safetensors file '{}' failed at byte {}: {}{}", path, offset,
                   n < 0 ? sys_error() : "no progress",
                   full ? " (free space there, or lower train.keep_checkpoints: a checkpoint save needs room for "
                          "one more checkpoint beside the ones kept)"
                        : "");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

}  // namespace

std::string_view st_dtype_name(StDtype dtype) { return dtype_row(dtype).name; }
size_t st_dtype_size(StDtype dtype) { return dtype_row(dtype).size; }

StDtype parse_st_dtype(std::string_view name) {
  for (const auto& row : kDtypes)
    if (row.name == name) return row.dtype;
  std::string known;
  for (const auto& row : kDtypes) known += (known.empty() ? "" : ", ") + std::string(row.name);
  ECHO_FAIL("unknown safetensors dtype '{}' (known: {})", name, known);
}

std::string format_shape(std::span<const int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t StTensorInfo::numel() const {
  // NOTE: a zero anywhere makes the tensor empty; checking it first keeps a shape such as
  // [2^62, 2, 0] from overflowing int64 on the way. The reader refuses shapes whose non-zero
  // dimensions multiply past int64, so the product below cannot overflow for a file it opened.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- reader -------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path, data::MappedFile::Access access) : path_(path) {
  try {
    file_ = data::MappedFile::open(path, access);
  } catch (const Error& e) {
    // A link that leads nowhere (a Hugging Face cache whose blob was removed) says so.
    std::error_code ec;
    const std::string unresolvable = std::filesystem::is_symlink(path, ec) ? why_unresolvable(path) : "";
    ECHO_INPUT_FAIL("cannot open safetensors file '{}': {}", path, unresolvable.empty() ? e.message() : unresolvable);
  }
  const uint64_t file_size = file_.size();
  ECHO_INPUT_CHECK(file_size >= 8, "safetensors file '{}' is {} bytes, too short for the 8-byte header length", path,
                   file_size);
  // NOTE: no cleanup on the error paths below: file_ is a member and unmaps itself.
  const auto* map = reinterpret_cast<const std::byte*>(file_.data());
  uint64_t header_len = 0;
  std::memcpy(&header_len, map, 8);
  ECHO_INPUT_CHECK(header_len <= file_size - 8,
                   "safetensors file '{}': header length {} exceeds the {} bytes that follow it (truncated, or not a "
                   "safetensors file)",
                   path, header_len, file_size - 8);
  ECHO_INPUT_CHECK(header_len <= kMaxHeaderBytes,
                   "safetensors file '{}': header length {} exceeds the limit of {} bytes", path, header_len,
                   kMaxHeaderBytes);
  const char* header = reinterpret_cast<const char*>(map + 8);
  data_begin_ = 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;

  // Refused before the DOM is built (a real header nests 3 levels): copying or printing a deeply
  // nested DOM recurses once per level and overflows the stack.
  const std::size_t too_deep = json_depth_excess(std::string_view(header, header_len));
  ECHO_INPUT_CHECK(too_deep == std::string_view::npos,
                   "safetensors file '{}': the header nests arrays/objects more than {} deep (at header byte {})", path,
                   kMaxJsonDepth, too_deep);
  nlohmann::json j;
  // JSON allows a key twice and nlohmann keeps the last: a tensor named twice would load the bytes
  // of one entry and ignore the other. The reference loader (safetensors) refuses such a header,
  // and so do we: the top-level keys are collected as the parser meets them.
  std::set<std::string> names;
  std::string twice;
  const nlohmann::json::parser_callback_t note_keys = [&](int depth, nlohmann::json::parse_event_t event,
                                                          nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second &&
        twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(header, header + header_len, note_keys);
  } catch (const nlohmann::json::exception& e) {
    ECHO_INPUT_FAIL("safetensors file '{}': the header is not valid JSON: {}", path, json_error_text(e));
  }
  ECHO_INPUT_CHECK(twice.empty(), "safetensors file '{}': the header names '{}' twice", path, twice);
  ECHO_INPUT_CHECK(j.is_object(), "safetensors file '{}': the header is not a JSON object", path);

  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      ECHO_INPUT_CHECK(value.is_object(), "safetensors file '{}': '__metadata__' is not an object", path);
      for (const auto& [mk, mv] : value.items()) {
        ECHO_INPUT_CHECK(mv.is_string(), "safetensors file '{}': '__metadata__' entry '{}' is not a string", path, mk);
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      ECHO_INPUT_FAIL("safetensors file '{}': tensor '{}': {}", path, key, what);
    };
    if (!value.is_object()) bad("the entry is not an object");
    if (!value.contains("dtype") || !value["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!value.contains("shape") || !value["shape"].is_array()) bad("missing or non-array 'shape'");
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
      bad("'data_offsets' must be an array of two integers");
    StTensorInfo t;
    t.name = key;
    try {
      t.dtype = parse_st_dtype(value["dtype"].get<std::string>());
    } catch (const Error& e) {
      bad(e.message());
    }
    // numel, and the product of the non-zero dimensions, which must fit int64 for numel() to
    // be computable (a zero dimension does not excuse [2^62, 2, 0]: numel() multiplies in int64).
    uint64_t numel = 1, nonzero = 1;
    constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    const std::string shape_text = json_excerpt(value["shape"]);
    for (const auto& d : value["shape"]) {
      if (!d.is_number_unsigned()) bad(fmt::format("shape {} must hold non-negative integers", shape_text));
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && (!checked_mul(nonzero, dim, nonzero) || nonzero > kInt64Max))
        bad(fmt::format("shape {} overflows: its dimensions multiply past 2^63", shape_text));
      numel *= dim;  // <= nonzero, or 0
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = value["data_offsets"];
    for (const auto& o : off) {
      // An integer past 2^64 - 1 is parsed as a double: it is a whole number out of range, not a
      // "negative" or fractional one (it read "must be non-negative integers").
      if (o.is_number_float() && o.get<double>() >= 18446744073709551616.0)  // 2^64: 8.0 or 1e3 are not
        bad(
            fmt::format("data_offsets {}: offset {} is out of range: beyond 2^64 - 1, the largest offset a file "
                        "can have (this one holds {} bytes of data)",
                        json_excerpt(off), o.dump(), data_size));
      if (!o.is_number_unsigned()) bad(fmt::format("data_offsets {} must be non-negative integers", json_excerpt(off)));
    }
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] run backwards", t.begin, t.end));
    if (t.end > data_size)
      bad(fmt::format("data_offsets [{}, {}] exceed the {} bytes of data in the file (truncated file?)", t.begin, t.end,
                      data_size));
    uint64_t nbytes = 0;
    if (!checked_mul(numel, st_dtype_size(t.dtype), nbytes) || nbytes != t.end - t.begin)
      bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] span {} bytes", format_shape(t.shape),
                      st_dtype_name(t.dtype), nbytes, t.begin, t.end, t.end - t.begin));
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  // The tensors tile the data region exactly, as the format's reference reader (Hugging Face's
  // safetensors, validate()) demands: no overlap, no unused bytes between tensors, and the last
  // one ends where the file does. A gap or a tail is a file another tool would refuse, most often
  // one cut or padded in a copy.
  const StTensorInfo* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const auto& t : tensors_) {
    if (t.begin == t.end) continue;
    ECHO_INPUT_CHECK(prev == nullptr || t.begin >= prev->end,
                     "safetensors file '{}': tensors '{}' (bytes [{}, {})) and '{}' (bytes [{}, {})) overlap", path,
                     prev ? prev->name : "", prev ? prev->begin : 0, prev ? prev->end : 0, t.name, t.begin, t.end);
    const uint64_t covered = prev ? prev->end : 0;
    ECHO_INPUT_CHECK(t.begin == covered,
                     "safetensors file '{}': data bytes [{}, {}) before tensor '{}' belong to no tensor (a safetensors "
                     "file's tensors follow each other without gaps)",
                     path, covered, t.begin, t.name);
    prev = &t;
  }
  const uint64_t covered = prev ? prev->end : 0;
  ECHO_INPUT_CHECK(covered == data_size,
                   "safetensors file '{}': {} bytes follow the last tensor's data (bytes [{}, {}) belong to no tensor; "
                   "a safetensors file ends with its last tensor): a damaged or appended-to file?",
                   path, data_size - covered, covered, data_size);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const StTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = index_.find(name);
  ECHO_INPUT_CHECK(it != index_.end(), "safetensors file '{}' has no tensor '{}'", path_, name);
  return tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const StTensorInfo& t = info(name);
  return {data() + t.begin, static_cast<size_t>(t.end - t.begin)};
}

void SafetensorsFile::read_f32(const std::string& name, int64_t offset, std::span<float> out) const {
  const StTensorInfo& t = info(name);
  const int64_t n = static_cast<int64_t>(out.size());
  ECHO_CHECK(offset >= 0 && offset + n <= t.numel(),
             "safetensors file '{}': elements [{}, {}) of tensor '{}' are outside its {} elements", path_, offset,
             offset + n, name, t.numel());
  const std::byte* src = data() + t.begin + static_cast<uint64_t>(offset) * st_dtype_size(t.dtype);
  switch (t.dtype) {
    case StDtype::f32:
      // NOTE: offsets need not be 4-aligned; an empty `out` may have a null data(), which memcpy
      // must not see even for 0 bytes.
      if (!out.empty()) std::memcpy(out.data(), src, out.size() * sizeof(float));
      return;
    case StDtype::bf16:
    case StDtype::f16: {
      const bool bf = t.dtype == StDtype::bf16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf ? bf16_bits_to_float(h) : half_bits_to_float(h);
      }
      return;
    }
    case StDtype::f64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return;
    default:
      ECHO_INPUT_FAIL(
          "safetensors file '{}': tensor '{}' is {}, which does not convert to F32 (F32, BF16, F16, F64 do)", path_,
          name, st_dtype_name(t.dtype));
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  std::vector<float> out(static_cast<size_t>(info(name).numel()));
  read_f32(name, 0, out);
  return out;
}

// ---- writer -------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<StTensorSpec> tensors,
                                     const StMetadata& metadata)
    : path_(path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (auto& spec : tensors) {
    ECHO_CHECK(spec.name != kMetadataKey && !spec.name.empty(), "safetensors file '{}': invalid tensor name '{}'", path,
               spec.name);
    ECHO_CHECK(seen.insert(spec.name).second, "safetensors file '{}': tensor '{}' given twice", path, spec.name);
    StTensorInfo t;
    t.name = spec.name;
    t.dtype = spec.dtype;
    t.shape = spec.shape;
    for (int64_t d : t.shape)
      ECHO_CHECK(d >= 0, "safetensors file '{}': tensor '{}' has a negative dimension in {}", path, t.name,
                 format_shape(t.shape));
    t.begin = offset;
    t.end = offset + static_cast<uint64_t>(t.numel()) * st_dtype_size(t.dtype);
    offset = t.end;
    header[t.name] = {
        {"dtype", std::string(st_dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    tensors_.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  data_start_ = 8 + header_len;
  written_.assign(tensors_.size(), 0);

  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ECHO_RUN_CHECK(fd_ >= 0, "cannot create safetensors file '{}': {}", path, sys_error());
  write_all(fd_, &header_len, 8, 0, path_);
  write_all(fd_, text.data(), text.size(), 8, path_);
  ECHO_RUN_CHECK(::ftruncate(fd_, static_cast<off_t>(data_start_ + offset)) == 0,
                 "cannot size safetensors file '{}': {}", path_, sys_error());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::write(size_t tensor_idx, int64_t offset, std::span<const float> values) {
  ECHO_CHECK(fd_ >= 0, "safetensors file '{}' is already closed", path_);
  ECHO_CHECK(tensor_idx < tensors_.size(), "safetensors file '{}': tensor index {} of {}", path_, tensor_idx,
             tensors_.size());
  const StTensorInfo& t = tensors_[tensor_idx];
  const int64_t n = static_cast<int64_t>(values.size());
  ECHO_CHECK(offset >= 0 && offset + n <= t.numel(),
             "safetensors file '{}': elements [{}, {}) of tensor '{}' are outside its {} elements", path_, offset,
             offset + n, t.name, t.numel());
  const size_t esize = st_dtype_size(t.dtype);
  const uint64_t at = data_start_ + t.begin + static_cast<uint64_t>(offset) * esize;
  if (t.dtype == StDtype::f32) {
    write_all(fd_, values.data(), values.size() * sizeof(float), at, path_);
  } else {
    ECHO_CHECK(t.dtype == StDtype::bf16 || t.dtype == StDtype::f16 || t.dtype == StDtype::f64,
               "safetensors file '{}': tensor '{}' is {}; the writer converts fp32 to F32, BF16, F16 or F64 only",
               path_, t.name, st_dtype_name(t.dtype));
    constexpr size_t kChunk = 1 << 20;
    std::vector<std::byte> buf(std::min(values.size(), kChunk) * esize);
    for (size_t b = 0; b < values.size(); b += kChunk) {
      const size_t m = std::min(kChunk, values.size() - b);
      for (size_t i = 0; i < m; ++i) {
        const float v = values[b + i];
        if (t.dtype == StDtype::f64) {
          const double d = v;
          std::memcpy(buf.data() + 8 * i, &d, 8);
        } else {
          const uint16_t h = t.dtype == StDtype::bf16 ? float_to_bf16_bits(v) : float_to_half_bits(v);
          std::memcpy(buf.data() + 2 * i, &h, 2);
        }
      }
      write_all(fd_, buf.data(), m * esize, at + b * esize, path_);
    }
  }
  written_[tensor_idx] += n;
}

void SafetensorsWriter::close() {
  ECHO_CHECK(fd_ >= 0, "safetensors file '{}' is already closed", path_);
  for (size_t i = 0; i < tensors_.size(); ++i)
    ECHO_CHECK(written_[i] == tensors_[i].numel(),
               "safetensors file '{}': {} of the {} elements of tensor '{}' written", path_, written_[i],
               tensors_[i].numel(), tensors_[i].name);
  const int fd = std::exchange(fd_, -1);
  const bool synced = ::fsync(fd) == 0;
  const std::string sync_err = synced ? "" : sys_error();
  const bool closed = ::close(fd) == 0;
  ECHO_RUN_CHECK(synced, "cannot sync safetensors file '{}' to disk: {}", path_, sync_err);
  ECHO_RUN_CHECK(closed, "cannot close safetensors file '{}': {}", path_, sys_error());
}

void write_safetensors(const std::string& path, const std::vector<StTensorSpec>& tensors,
                       const std::vector<std::span<const float>>& values, const StMetadata& metadata) {
  ECHO_CHECK(tensors.size() == values.size(), "write_safetensors '{}': {} tensors but {} value arrays", path,
             tensors.size(), values.size());
  SafetensorsWriter writer(path, tensors, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) writer.write(i, 0, values[i]);
  writer.close();
}

}  // namespace echo::train
