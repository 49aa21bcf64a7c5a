// The cuda device tag's memory: allocation, zeroing and copies through the CUDA runtime. This is
// the one registration point in core that depends on ECHO_CUDA; a build without the CUDA
// backend gets versions that say so instead of failing to link.
#include "core/tensor.h"

#ifdef ECHO_CUDA

#include <cuda_runtime.h>

namespace echo {

namespace {

[[noreturn]] void fail_cuda(cudaError_t err, const std::string& what) {
  ECHO_FAIL("{} failed: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

cudaMemcpyKind copy_kind(Device dst, Device src) {
  if (dst == Device::cuda) return src == Device::cuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return src == Device::cuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no GPU: clear the (non-sticky) error, report none
    return 0;
  }
  return n;
}

namespace detail {

void* cuda_alloc(size_t nbytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, nbytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail_cuda(err, fmt::format("cudaMalloc of {} bytes ({} devices visible)", nbytes, cuda_device_count()));
  }
  return p;
}

void cuda_free(void* ptr) noexcept {
  // NOTE: a destructor must not throw; a failing cudaFree means the context is already gone
  // (process teardown) or corrupted, and the next checked CUDA call reports that.
  (void)cudaFree(ptr);
}

void cuda_zero(void* ptr, size_t nbytes) {
  const cudaError_t err = cudaMemset(ptr, 0, nbytes);
  if (err != cudaSuccess) fail_cuda(err, fmt::format("cudaMemset of {} bytes", nbytes));
}

void cuda_copy_2d(void* dst, size_t dst_pitch, Device dst_device, const void* src, size_t src_pitch, Device src_device,
                  size_t width, size_t height) {
  const cudaMemcpyKind kind = copy_kind(dst_device, src_device);
  cudaError_t err;
  if (height == 1 || (dst_pitch == width && src_pitch == width)) {
    err = cudaMemcpy(dst, src, width * height, kind);
  } else {
    err = cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, height, kind);
  }
  if (err != cudaSuccess) {
    fail_cuda(err, fmt::format("copy of {} rows x {} bytes ({} -> {})", height, width, src_device, dst_device));
  }
}

}  // namespace detail
}  // namespace echo

#else  // !ECHO_CUDA

namespace echo {

namespace {
[[noreturn]] void fail_no_cuda(const char* what) {
  ECHO_FAIL("{}: this build has no CUDA backend (reconfigure with -DECHO_CUDA=ON on a machine with the CUDA toolkit)",
            what);
}
}  // namespace

int cuda_device_count() { return 0; }

namespace detail {
void* cuda_alloc(size_t) { fail_no_cuda("allocating a cuda tensor"); }
void cuda_free(void*) noexcept {}
void cuda_zero(void*, size_t) { fail_no_cuda("zeroing a cuda tensor"); }
void cuda_copy_2d(void*, size_t, Device, const void*, size_t, Device, size_t, size_t) {
  fail_no_cuda("copying to or from a cuda tensor");
}
}  // namespace detail

}  // namespace echo

#endif  // ECHO_CUDA
