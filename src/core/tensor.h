// echo::Tensor: a shaped, typed view into a reference-counted buffer on the host or a CUDA
// device. Views (view, slice, flatten) share the buffer; clone and the conversions copy it.
// Storage for the cuda tag comes from cuda_memory.cpp, the one file in core that calls CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace echo {

// Number of CUDA devices this process can use; 0 when the build has no CUDA backend, when no
// driver is installed or when no GPU is present. Tests use it to skip their device part.
int cuda_device_count();

namespace detail {
// Device-memory primitives behind the cuda device tag, implemented in cuda_memory.cpp. A build
// without the CUDA backend throws echo::Error ("this build has no CUDA backend") from each of
// them except cuda_free, which has nothing to free there.
// NOTE: they are synchronous and use the legacy default stream, so they order with work on
// blocking streams only; a kernel on a cudaStreamNonBlocking stream must be synchronized first.
void* cuda_alloc(size_t nbytes);
void cuda_free(void* ptr) noexcept;
void cuda_zero(void* ptr, size_t nbytes);
// Copies `height` rows of `width` bytes; rows start `dst_pitch` / `src_pitch` bytes apart.
// Either side may be host or device memory.
void cuda_copy_2d(void* dst, size_t dst_pitch, Device dst_device, const void* src, size_t src_pitch, Device src_device,
                  size_t width, size_t height);
}  // namespace detail

// Bytes of host tensor storage alive now and the most alive at once since the last reset
// (requested sizes, before alignment). The memory-plan test measures the model's real peak
// with it (model/memory_plan.h).
struct HostMemoryStats {
  size_t live = 0, peak = 0;
};
HostMemoryStats host_memory_stats();
void reset_host_memory_peak();  // peak = live
// "512 B", "3.00 KiB", "1.25 GiB": three significant digits, binary units.
std::string format_bytes(size_t bytes);

// "(2, 3)"; "()" for a scalar.
std::string format_shape(const std::vector<int64_t>& shape);

// A buffer and the deleter that releases it, shared by every tensor viewing it.
class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  // Takes ownership of `data` when `deleter` is set; an empty deleter leaves the memory to the caller.
  Storage(void* data, size_t nbytes, Device device, Deleter deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // 64-byte aligned host memory or cudaMalloc'd device memory; uninitialised.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

class Tensor {
 public:
  // An undefined tensor (defined() is false); assign a real one before use.
  Tensor() = default;

  // Row-major (contiguous) tensors. `empty` leaves the memory uninitialised.
  static Tensor empty(std::vector<int64_t> shape, DType dtype, Device device = Device::cpu);
  static Tensor zeros(std::vector<int64_t> shape, DType dtype, Device device = Device::cpu);
  // Views memory the caller owns (a memory map, a peer's IPC buffer); `deleter`, when set, runs
  // once the last tensor viewing it goes away. The memory must hold the contiguous shape.
  static Tensor from_blob(void* data, std::vector<int64_t> shape, DType dtype, Device device = Device::cpu,
                          Storage::Deleter deleter = {});
  // A host tensor holding a copy of `values` (values.size() must equal the shape's numel).
  // uint16_t values need the dtype (bf16 or f16); the other element types imply it.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<int64_t> shape, DType dtype);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<int64_t> shape);

  bool defined() const { return storage_ != nullptr; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }  // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[normalize_dim(i)]; }  // negative i counts from the back
  int64_t stride(int i) const { return strides_[normalize_dim(i)]; }
  int64_t storage_offset() const { return offset_; }  // in elements, from the start of the buffer
  int64_t numel() const { return numel_; }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }  // of the view
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_ == Device::cpu; }
  bool is_cuda() const { return device_ == Device::cuda; }
  bool is_contiguous() const;
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  long storage_use_count() const { return storage_.use_count(); }
  // "bf16 (4, 128) cuda" (with " strided" for a non-contiguous view), for error messages.
  std::string describe() const;

  // The first element of the view, typed; throws unless T is the dtype's element type (see
  // dtype_holds). A cuda tensor's pointer is a device pointer. A non-contiguous view's elements
  // lie at the strides().
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  void* raw();
  const void* raw() const;

  // Views sharing the storage. NOTE: like torch, a view of a const Tensor is writable: Tensor
  // is a handle, constness does not reach the buffer.
  Tensor view(std::vector<int64_t> shape) const;            // same numel, contiguous; one -1 is inferred
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor flatten() const;                                   // (numel), contiguous only
  Tensor contiguous() const;                                // *this when contiguous, else a copy

  // Copies the elements of `src` (same shape and dtype) into this tensor's storage. Host<->host
  // takes any strides; a copy touching a device needs each side contiguous or 2-D pitched (rows
  // of contiguous elements, e.g. a column slice of a matrix).
  void copy_from(const Tensor& src);
  void fill_zero();

  Tensor clone() const;            // contiguous copy on the same device
  Tensor to(Device device) const;  // *this when already there
  Tensor to(DType dtype) const;    // host only; *this when already that dtype. f32<->bf16/f16 round
                                   // to nearest even (half.h); integers convert to f32 exactly
                                   // up to 2^24. Other pairs throw.
  Tensor to_f32() const { return to(DType::f32); }
  template <class T>
  std::vector<T> to_vector() const;  // host only; the elements in row-major order

 private:
  int normalize_dim(int i) const;
  void check_element_type(bool ok, std::string_view type_name) const;

  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

// The elements of a contiguous host tensor of T (checked), for loops and std algorithms.
template <class T>
std::span<T> host_span(Tensor& t);
template <class T>
std::span<const T> host_span(const Tensor& t);

// ---- template definitions -------------------------------------------------------------------

template <class T>
T* Tensor::data() {
  check_element_type(dtype_holds<T>(dtype_), element_type_name<T>());
  return static_cast<T*>(raw());
}

template <class T>
const T* Tensor::data() const {
  check_element_type(dtype_holds<T>(dtype_), element_type_name<T>());
  return static_cast<const T*>(raw());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, std::vector<int64_t> shape, DType dtype) {
  ECHO_CHECK(dtype_holds<T>(dtype), "from_vector: {} values cannot fill a {} tensor", element_type_name<T>(), dtype);
  Tensor t = empty(std::move(shape), dtype);
  ECHO_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: {} values for shape {} ({} elements)",
             values.size(), format_shape(t.shape()), t.numel());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}

template <class T>
std::span<T> host_span(Tensor& t) {
  ECHO_CHECK(t.is_cpu() && t.is_contiguous(), "host_span needs a contiguous host tensor, got {}", t.describe());
  return {t.data<T>(), static_cast<size_t>(t.numel())};
}

template <class T>
std::span<const T> host_span(const Tensor& t) {
  ECHO_CHECK(t.is_cpu() && t.is_contiguous(), "host_span needs a contiguous host tensor, got {}", t.describe());
  return {t.data<T>(), static_cast<size_t>(t.numel())};
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, std::vector<int64_t> shape) {
  static_assert(!std::is_same_v<T, uint16_t>, "uint16_t is ambiguous: pass DType::bf16 or DType::f16");
  if constexpr (std::is_same_v<T, float>)
    return from_vector(values, std::move(shape), DType::f32);
  else if constexpr (std::is_same_v<T, double>)
    return from_vector(values, std::move(shape), DType::f64);
  else if constexpr (std::is_same_v<T, int8_t>)
    return from_vector(values, std::move(shape), DType::i8);
  else if constexpr (std::is_same_v<T, int32_t>)
    return from_vector(values, std::move(shape), DType::i32);
  else if constexpr (std::is_same_v<T, uint8_t>)
    return from_vector(values, std::move(shape), DType::u8);
  else
    static_assert(dtype_holds<T>(DType::f32), "unsupported element type");
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  ECHO_CHECK(is_cpu(), "to_vector needs a host tensor, got {}", describe());
  const Tensor c = contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + numel_);
}

}  // namespace echo
