// The kernel emulator's device side (docs/design.md §15b): compiles the CUDA C++ of kernels/*.cu
// with the host compiler and runs each launch on the CPU, one fiber per GPU thread, so CI (no
// GPU) executes the kernels' indexing, loops, shared memory, barriers and shuffles against the CPU
// reference, under the sanitizers. Force-included (-include) before everything else in the emulated
// kernel objects; kernels launch through ECHO_LAUNCH (kernels/launch.cuh), which here builds a
// LaunchConfig and binds the kernel (below) instead of using <<<...>>>.
//
// What it checks beyond the results: launch shapes the hardware refuses (block > 1024 threads,
// grid y/z > 65535, zero sizes) become the launch error cudaGetLastError reports; a __syncthreads
// that not every live thread of the block reaches, a shuffle whose warp has exited or diverged
// lanes, a barrier pairing threads at two places in the source, a pointer argument that is not
// device memory, and a deadlocked block abort with the kernel's name. Threads run in a chosen order
// (ECHO_EMU_ORDER=alternate|forward|reverse|shuffle) so a missing barrier shows as a different result.
// Launches run later, on their stream's own host thread (cuda_emu_streams.h), so stream ordering
// and host synchronization are checked too. What it cannot check: concurrency between the blocks of
// one launch (they run one after another), memory-model ordering, timing, and device limits other
// than the launch shape. It is not a GPU: docs/design.md §15b says what only a GPU run proves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu_runtime.h"

// The CUDA qualifiers mean nothing on the host: every function is a host function and a
// __shared__ variable is one per block (blocks run one at a time, each thread of a block is a
// fiber of the same OS thread).
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace echo::emu {

// What the running fiber sees as its built-in variables.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

const ThreadContext& current_thread();
// The running thread's lane: its linear index in the block (x fastest) modulo 32.
int current_lane();
// __nanosleep's stand-in: the other fibers of the block run, and the OS thread yields the CPU.
void nap();
// Aborts naming the running kernel, block and thread.
[[noreturn]] void kernel_error(const std::string& what);

// Barriers: the calling fiber waits until every live thread of its block (or lanes of its warp)
// arrives. Abort on divergence, as described above.
// `where`: the barrier's place in the source; every thread a barrier opens for must wait at the
// same one (threads at two different __syncthreads, or shuffles, are an error, not a pairing).
void sync_block(std::source_location where);
// Exchanges `bytes` bytes of each lane of the caller's warp: copies `mine` in, waits for the whole
// warp, copies lane `src_lane`'s bytes to `out` (two slot sets in turn: one wait per exchange).
void warp_exchange(const void* mine, void* out, int src_lane, size_t bytes, unsigned mask, const char* what,
                   std::source_location where);

// Issues the launch on `stream`: when the stream reaches it, body() runs once per thread of every
// block of the grid. A launch shape the hardware refuses records cudaErrorInvalidConfiguration for
// cudaGetLastError at the call and runs nothing.
void launch(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            std::function<void()> body);

template <class... Params>
class BoundKernel {
 public:
  BoundKernel(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
              void (*kernel)(Params...))
      : name_(name), grid_(grid), block_(block), shared_bytes_(shared_bytes), stream_(stream), kernel_(kernel) {}

  // NOTE: the arguments are converted to the parameter types and copied at the call, as a real
  // launch does on the host; each thread gets its own copies of those.
  template <class... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
    const std::tuple<std::decay_t<Params>...> converted(static_cast<Params>(args)...);
    check_pointers(converted, std::index_sequence_for<Params...>{});
    auto kernel = kernel_;
    launch(name_, grid_, block_, shared_bytes_, stream_, [converted, kernel] { std::apply(kernel, converted); });
  }

 private:
  template <class Tuple, size_t... I>
  void check_pointers(const Tuple& t, std::index_sequence<I...>) const {
    (check_one(static_cast<int>(I), std::get<I>(t)), ...);
  }
  template <class A>
  void check_one(int index, const A& a) const {
    if constexpr (std::is_pointer_v<A>) check_kernel_pointer(name_, index, a);
  }

  const char* name_;
  dim3 grid_, block_;
  size_t shared_bytes_;
  cudaStream_t stream_;
  void (*kernel_)(Params...);
};

// The configuration half of ECHO_LAUNCH; bind() takes the kernel, the call its arguments.
struct LaunchConfig {
  const char* name;
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  template <class... Params>
  BoundKernel<Params...> bind(void (*kernel)(Params...)) const {
    return BoundKernel<Params...>(name, grid, block, shared_bytes, stream, kernel);
  }
};

}  // namespace echo::emu

#define threadIdx (::echo::emu::current_thread().thread_idx)
#define blockIdx (::echo::emu::current_thread().block_idx)
#define blockDim (::echo::emu::current_thread().block_dim)
#define gridDim (::echo::emu::current_thread().grid_dim)

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  ::echo::emu::sync_block(where);
}
// The emulator runs blocks one after another and a fiber switch is a full fence.
inline void __threadfence() {}
inline void __threadfence_system() {}
// A spinning thread lets the other threads of its block, and the other processes, run.
inline void __nanosleep(unsigned) { ::echo::emu::nap(); }

// Lane l reads lane l ^ lane_mask; with width < 32, a lane whose partner lies in a later group of
// `width` lanes reads its own value (the CUDA C++ Programming Guide's rule).
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = ::echo::emu::kWarpSize,
                  std::source_location where = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "shuffles move trivially copyable values");
  constexpr int kWarp = ::echo::emu::kWarpSize;
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0)
    ::echo::emu::kernel_error("__shfl_xor_sync width " + std::to_string(width) + " is not a power of two <= 32");
  const int lane = ::echo::emu::current_lane();
  int src = lane ^ (lane_mask & (kWarp - 1));
  if (src >= (lane / width + 1) * width) src = lane;
  T out;
  ::echo::emu::warp_exchange(&value, &out, src, sizeof(T), mask, "__shfl_xor_sync", where);
  return out;
}

// Atomics: a compare-and-swap loop over the compiler's atomics, so they hold across processes
// sharing memory (the cuda_ipc regions) as well as among the fibers of one OS thread.
namespace echo::emu {
template <class T, class Update>
T atomic_update(T* address, Update update) {
  T old;
  __atomic_load(address, &old, __ATOMIC_SEQ_CST);
  for (;;) {
    T desired = update(old);
    if (__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
  }
}
}  // namespace echo::emu

template <class T>
T atomicAdd(T* address, std::type_identity_t<T> value) {
  return ::echo::emu::atomic_update(address, [value](T old) { return static_cast<T>(old + value); });
}
template <class T>
T atomicMax(T* address, std::type_identity_t<T> value) {
  return ::echo::emu::atomic_update(address, [value](T old) { return value > old ? value : old; });
}
template <class T>
T atomicMin(T* address, std::type_identity_t<T> value) {
  return ::echo::emu::atomic_update(address, [value](T old) { return value < old ? value : old; });
}
template <class T>
T atomicCAS(T* address, std::type_identity_t<T> compare, std::type_identity_t<T> value) {
  return ::echo::emu::atomic_update(address, [compare, value](T old) { return old == compare ? value : old; });
}
