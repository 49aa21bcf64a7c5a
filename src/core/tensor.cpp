// Tensor construction, views, copies and host-side dtype conversions. Device memory goes
// through the detail::cuda_* primitives (cuda_memory.cpp); nothing here names CUDA.
#include "core/tensor.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <optional>

#include "core/half.h"

namespace echo {

namespace {

constexpr size_t kHostAlignment = 64;

int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ECHO_CHECK(d >= 0, "negative dimension in shape {}", format_shape(shape));
    ECHO_CHECK(d == 0 || n <= INT64_MAX / d, "shape {} overflows int64 elements", format_shape(shape));
    n *= d;
  }
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// One dimension of a copy after merging: `size` elements, `dst`/`src` strides in elements.
struct CopyDim {
  int64_t size, dst, src;
};

// Drops size-1 dimensions and merges neighbours that are contiguous in both tensors, so a
// copy between two row-major tensors becomes one dimension with strides 1.
std::vector<CopyDim> merge_copy_dims(const std::vector<int64_t>& shape, const std::vector<int64_t>& dst_strides,
                                     const std::vector<int64_t>& src_strides) {
  std::vector<CopyDim> dims;  // outermost first
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    const CopyDim d{shape[i], dst_strides[i], src_strides[i]};
    if (!dims.empty()) {
      CopyDim& prev = dims.back();
      if (prev.dst == d.dst * d.size && prev.src == d.src * d.size) {
        prev = {prev.size * d.size, d.dst, d.src};
        continue;
      }
    }
    dims.push_back(d);
  }
  return dims;
}

// A tensor laid out as `rows` rows of `cols` contiguous elements, rows `pitch` elements apart.
struct Pitched {
  int64_t rows, cols, pitch;
};

std::optional<Pitched> as_pitched(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  const std::vector<CopyDim> dims = merge_copy_dims(shape, strides, strides);
  if (dims.empty()) return Pitched{1, 1, 1};
  if (dims.back().dst != 1 || dims.size() > 2) return std::nullopt;
  if (dims.size() == 1) return Pitched{1, dims[0].size, dims[0].size};
  return Pitched{dims[0].size, dims[1].size, dims[0].dst};
}

// Elementwise host copy for arbitrary strides; contiguous inner runs go through memcpy.
void strided_host_copy(std::byte* dst, const std::byte* src, size_t esize, const std::vector<CopyDim>& dims) {
  if (dims.empty()) {
    std::memmove(dst, src, esize);
    return;
  }
  const CopyDim inner = dims.back();
  const bool run = inner.dst == 1 && inner.src == 1;
  const size_t outer_dims = dims.size() - 1;
  std::vector<int64_t> idx(outer_dims, 0);
  while (true) {
    int64_t d_off = 0, s_off = 0;
    for (size_t k = 0; k < outer_dims; ++k) {
      d_off += idx[k] * dims[k].dst;
      s_off += idx[k] * dims[k].src;
    }
    if (run) {
      std::memmove(dst + d_off * esize, src + s_off * esize, inner.size * esize);
    } else {
      for (int64_t j = 0; j < inner.size; ++j)
        std::memcpy(dst + (d_off + j * inner.dst) * esize, src + (s_off + j * inner.src) * esize, esize);
    }
    size_t k = outer_dims;
    while (k > 0 && ++idx[k - 1] == dims[k - 1].size) idx[--k] = 0;
    if (k == 0) return;
  }
}

// The host conversion loops; both pointers address `n` contiguous elements.
void convert_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  float* out = static_cast<float*>(dst);
  if (dst_dtype == DType::f32) {
    switch (src_dtype) {
      case DType::bf16: {
        const auto* in = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i]);
        return;
      }
      case DType::f16: {
        const auto* in = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(in[i]);
        return;
      }
      case DType::i8: {
        const auto* in = static_cast<const int8_t*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
        return;
      }
      case DType::i32: {
        const auto* in = static_cast<const int32_t*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
        return;
      }
      case DType::u8: {
        const auto* in = static_cast<const uint8_t*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
        return;
      }
      case DType::f64: {
        const auto* in = static_cast<const double*>(src);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
        return;
      }
      case DType::f32:
        break;
    }
  }
  if (dst_dtype == DType::f64 && src_dtype == DType::f32) {
    const auto* in = static_cast<const float*>(src);
    auto* out64 = static_cast<double*>(dst);
    for (int64_t i = 0; i < n; ++i) out64[i] = in[i];
    return;
  }
  auto* out16 = static_cast<uint16_t*>(dst);
  const auto* in16 = static_cast<const uint16_t*>(src);
  const auto* in32 = static_cast<const float*>(src);
  if (src_dtype == DType::f32 && dst_dtype == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_bf16_bits(in32[i]);
  } else if (src_dtype == DType::f32 && dst_dtype == DType::f16) {
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_half_bits(in32[i]);
  } else if (src_dtype == DType::bf16 && dst_dtype == DType::f16) {
    // bf16 -> f32 is exact, so this rounds once.
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_half_bits(bf16_bits_to_float(in16[i]));
  } else if (src_dtype == DType::f16 && dst_dtype == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_bf16_bits(half_bits_to_float(in16[i]));
  } else {
    ECHO_FAIL("no conversion from {} to {}: supported are f32/bf16/f16 among themselves, f32/f64 both ways and integers to f32", src_dtype,
              dst_dtype);
  }
}

}  // namespace

std::string format_shape(const std::vector<int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

// ---- Storage --------------------------------------------------------------------------------

Storage::Storage(void* data, size_t nbytes, Device device, Deleter deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_ && data_) deleter_(data_);
}

namespace {
std::atomic<size_t> g_host_live{0}, g_host_peak{0};

void count_host_allocation(size_t nbytes) {
  const size_t live = g_host_live.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = g_host_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_host_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}
}  // namespace

HostMemoryStats host_memory_stats() { return {g_host_live.load(), g_host_peak.load()}; }
void reset_host_memory_peak() { g_host_peak.store(g_host_live.load()); }

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return fmt::format("{:.{}f} {}", v, v < 10 ? 2 : 1, units[u]);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (nbytes == 0) return std::make_shared<Storage>(nullptr, 0, device, Deleter{});
  if (device == Device::cuda)
    return std::make_shared<Storage>(detail::cuda_alloc(nbytes), nbytes, device, detail::cuda_free);
  // operator new with alignment throws std::bad_alloc; report it as an echo::Error with the size.
  const size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = ::operator new (rounded, std::align_val_t{kHostAlignment}, std::nothrow);
  ECHO_CHECK(p != nullptr, "host allocation of {} bytes failed", nbytes);
  count_host_allocation(nbytes);
  return std::make_shared<Storage>(p, nbytes, device, [nbytes](void* q) {
    g_host_live.fetch_sub(nbytes, std::memory_order_relaxed);
    ::operator delete (q, std::align_val_t{kHostAlignment});
  });
}

// ---- Tensor: construction -------------------------------------------------------------------

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = checked_numel(shape);
  ECHO_CHECK(static_cast<uint64_t>(t.numel_) <= SIZE_MAX / dtype_size(dtype), "shape {} of {} is too large",
             format_shape(shape), dtype);
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = Storage::allocate(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_zero();
  return t;
}

Tensor Tensor::from_blob(void* data, std::vector<int64_t> shape, DType dtype, Device device, Storage::Deleter deleter) {
  Tensor t;
  t.numel_ = checked_numel(shape);
  ECHO_CHECK(data != nullptr || t.numel_ == 0, "from_blob: null pointer for shape {}", format_shape(shape));
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device, std::move(deleter));
  return t;
}

// ---- Tensor: properties ---------------------------------------------------------------------

int Tensor::normalize_dim(int i) const {
  const int n = ndim();
  ECHO_CHECK(i >= -n && i < n, "dimension {} out of range for shape {}", i, format_shape(shape_));
  return i < 0 ? i + n : i;
}

bool Tensor::is_contiguous() const {
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{} {} {}{}", dtype_, format_shape(shape_), device_, is_contiguous() ? "" : " strided");
}

void Tensor::check_element_type(bool ok, std::string_view type_name) const {
  ECHO_CHECK(defined(), "data<{}>() on an undefined tensor", type_name);
  ECHO_CHECK(ok, "data<{}>() on a {} tensor {}: element type does not match the dtype", type_name, dtype_,
             format_shape(shape_));
}

void* Tensor::raw() {
  if (!storage_ || !storage_->data()) return nullptr;
  return static_cast<std::byte*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

const void* Tensor::raw() const { return const_cast<Tensor*>(this)->raw(); }

// ---- Tensor: views --------------------------------------------------------------------------

Tensor Tensor::view(std::vector<int64_t> shape) const {
  ECHO_CHECK(defined(), "view of an undefined tensor");
  ECHO_CHECK(is_contiguous(), "view {} of the non-contiguous tensor {}: call contiguous() first", format_shape(shape),
             describe());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ECHO_CHECK(infer < 0, "view {}: at most one dimension may be -1", format_shape(shape));
      infer = static_cast<int>(i);
    } else {
      ECHO_CHECK(shape[i] >= 0, "view {}: negative dimension", format_shape(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    ECHO_CHECK(known > 0 && numel_ % known == 0, "view {} of {}: cannot infer the -1 dimension", format_shape(shape),
               describe());
    shape[infer] = numel_ / known;
  }
  ECHO_CHECK(checked_numel(shape) == numel_, "view {} of {}: element counts differ ({} vs {})", format_shape(shape),
             describe(), checked_numel(shape), numel_);
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  ECHO_CHECK(defined(), "slice of an undefined tensor");
  const int d = normalize_dim(dim);
  ECHO_CHECK(0 <= start && start <= end && end <= shape_[d], "slice [{}, {}) out of range for dim {} of shape {}",
             start, end, d, format_shape(shape_));
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  t.numel_ = checked_numel(t.shape_);
  return t;
}

Tensor Tensor::flatten() const { return view({numel_}); }

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

// ---- Tensor: copies and conversions ---------------------------------------------------------

void Tensor::copy_from(const Tensor& src) {
  ECHO_CHECK(defined() && src.defined(), "copy_from with an undefined tensor ({} <- {})", describe(), src.describe());
  ECHO_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_,
             "copy_from: destination {} and source {} differ in shape or dtype", describe(), src.describe());
  if (numel_ == 0) return;
  const size_t esize = element_size();
  auto* dst_p = static_cast<std::byte*>(raw());
  const auto* src_p = static_cast<const std::byte*>(src.raw());
  if (is_cpu() && src.is_cpu()) {
    // NOTE: memmove keeps an exact self-copy correct; partially overlapping strided views are not supported.
    strided_host_copy(dst_p, src_p, esize, merge_copy_dims(shape_, strides_, src.strides_));
    return;
  }
  std::optional<Pitched> d = as_pitched(shape_, strides_);
  std::optional<Pitched> s = as_pitched(src.shape_, src.strides_);
  // A contiguous side (one row) can take the other side's row length.
  if (d && s && d->rows == 1 && s->rows > 1) d = Pitched{s->rows, s->cols, s->cols};
  if (d && s && s->rows == 1 && d->rows > 1) s = Pitched{d->rows, d->cols, d->cols};
  ECHO_CHECK(
      d && s && d->rows == s->rows && d->cols == s->cols,
      "copy_from between {} and {}: a device copy needs each side contiguous or 2-D pitched; call contiguous() first",
      describe(), src.describe());
  detail::cuda_copy_2d(dst_p, d->pitch * esize, device_, src_p, s->pitch * esize, src.device_, d->cols * esize,
                       d->rows);
}

void Tensor::fill_zero() {
  ECHO_CHECK(defined(), "fill_zero on an undefined tensor");
  if (numel_ == 0) return;
  if (is_contiguous()) {
    if (is_cuda())
      detail::cuda_zero(raw(), nbytes());
    else
      std::memset(raw(), 0, nbytes());
    return;
  }
  copy_from(zeros(shape_, dtype_, device_));
}

Tensor Tensor::clone() const {
  ECHO_CHECK(defined(), "clone of an undefined tensor");
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  ECHO_CHECK(defined(), "to({}) of an undefined tensor", device);
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  ECHO_CHECK(defined(), "to({}) of an undefined tensor", dtype);
  if (dtype == dtype_) return *this;
  ECHO_CHECK(is_cpu(), "dtype conversion {} -> {} runs on the host; {} is on {}", dtype_, dtype, format_shape(shape_),
             device_);
  const Tensor src = contiguous();
  Tensor out = empty(shape_, dtype, Device::cpu);
  if (numel_ > 0) convert_host(out.raw(), dtype, src.raw(), dtype_, numel_);
  return out;
}

}  // namespace echo
