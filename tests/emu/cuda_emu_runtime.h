// The kernel emulator's host side (tests/emu/cuda_emu_runtime.cpp): the launch error state and the
// stream check the scheduler shares with the emulated CUDA runtime API, and the streams
// (cuda_emu_streams.h) the stand-ins issue their work on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "cuda_emu_streams.h"

namespace echo::emu {

// The emulated device's limits: a launch beyond them is refused (cuda_emu_grid.cpp) and
// cudaGetDeviceProperties reports them.
constexpr int kWarpSize = 32;
constexpr int kMaxBlockThreads = 1024;
constexpr int kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 0x7fffffffu;
constexpr unsigned kMaxGridYZ = 65535;
constexpr size_t kMaxSharedBytes = size_t{48} << 10;  // dynamic shared memory without an opt-in

// The host's monotonic clock in ns (%globaltimer's and the events' stand-in).
uint64_t now_ns();

// Clears ASan's stale shadow of a fresh mapping (an unmapped range reused: a thread's old stack).
void unpoison_mapping(void* p, size_t bytes);
// True when [p, p + bytes) lies inside one live allocation of cudaMalloc / cudaMallocAsync.
bool is_device_range(const void* p, size_t bytes);
// Aborts naming the kernel when the pointer argument at `index` is neither null nor inside (or one
// past the end of) device memory or pinned host memory: on a GPU the kernel's access would fault.
void check_kernel_pointer(const char* kernel_name, int index, const void* p);
// Records a launch error for the next cudaGetLastError / cudaPeekAtLastError, as the runtime does.
void record_launch_error(cudaError_t error);
// Aborts naming the kernel when `stream` is neither a default stream nor one created and not
// destroyed.
void check_stream(cudaStream_t stream, const char* kernel_name);
// The value of the setting `name`, one of `allowed` (the first when unset or empty); any other value
// ends the program naming the setting and the values it takes.
std::string env_choice(const char* name, std::initializer_list<const char*> allowed);
// The whole-number setting `name`, `fallback` when unset or empty; anything else than a whole
// number in [lo, hi] ends the program naming the setting and the range.
long env_number(const char* name, long fallback, long lo, long hi);
// ECHO_EMU_ORDER: "alternate" (the default: blocks and launches forward and backward in turn),
// "forward", "reverse" or "shuffle".
const std::string& thread_order();

}  // namespace echo::emu
