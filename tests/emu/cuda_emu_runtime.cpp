// The part of the CUDA runtime API the kernels and their tests use, on host memory (docs/design.md
// §15b). Linked into the emulator's test programs, these definitions take the place of
// libcudart's (an executable's symbols come first). Device work (kernels, copies, fills, frees in
// stream order, event records) runs on the emulated streams (cuda_emu_streams.h), each on its own
// thread; the host blocks where the runtime documents that it blocks. Device memory is host
// memory, kept in a table so a copy whose direction does not match its pointers, a double free and a
// free of a pointer never allocated are reported as the runtime reports them (an error code) instead
// of passing.
#include "cuda_emu_runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda_emu_streams.h"

// ASan's, present when the program is linked with it (the emulated tests are); this file itself is
// not instrumented.
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));
extern "C" void __asan_poison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));

namespace echo::emu {
namespace {

// NOTE: ASan does not clear its shadow of an address range that was unmapped (a thread's stack,
// say, with its redzones) before mmap hands the range out again: a fresh mapping is addressable.
void unpoison(void* p, size_t bytes) {
  if (__asan_unpoison_memory_region != nullptr) __asan_unpoison_memory_region(p, bytes);
}
void poison(void* p, size_t bytes) {
  if (__asan_poison_memory_region != nullptr) __asan_poison_memory_region(p, bytes);
}

constexpr size_t kAlignment = 256;                        // cudaMalloc's guarantee
constexpr size_t kIpcGranule = size_t{2} << 20;           // cudaMalloc sizes made exportable
constexpr uint64_t kHandleMagic = 0x6563686f2d697063ull;  // "echo-ipc"
constexpr size_t kDeviceBytes = size_t{80} << 30;         // what the emulated device reports

// Device memory: a heap block (ASan's redzones right after its last byte), or, for a cudaMalloc
// of whole 2 MiB pages (what CUDA IPC exports, src/comm/p2p/cuda_ipc_workspace.cpp), a shared
// memfd mapping another process can map by cudaIpcOpenMemHandle; or such a mapping of a peer's.
struct Allocation {
  size_t bytes = 0;
  int fd = -1;          // the memfd of an exportable allocation (kept open for the peers)
  bool opened = false;  // a peer's allocation mapped here: cudaIpcCloseMemHandle, not cudaFree
  bool pooled = false;  // cudaMallocAsync's
  uint64_t id = 0;      // which allocation (an address is reused)
};

// The error cudaGetLastError returns: one per host thread, as the runtime keeps it.
thread_local cudaError_t t_last_error = cudaSuccess;

struct State {
  std::mutex mutex;
  std::map<const char*, Allocation> device;  // live device memory by start: allocations and opened handles
  std::map<const char*, size_t> pinned;      // live cudaMallocHost blocks by start
  // cudaMallocAsync blocks whose stream has not reached the allocation yet (by id): poisoned.
  std::set<uint64_t> awaiting_stream;
  // Live events: their flags, where in which stream they were last recorded (no stream: never)
  // and when that record ran (host ns; 0 not yet); `records` tells a record's run from an older one's.
  struct Event {
    unsigned flags = 0;
    StreamMark mark;
    uint64_t recorded_ns = 0;
    uint64_t records = 0;
  };
  std::map<cudaEvent_t, Event> events;
  size_t used = 0;
  // The default pool (cudaMallocAsync's memory only, as on the device): bytes in use and their
  // high-water mark, and bytes reserved: with the release threshold at its maximum (what the CUDA
  // backend sets) the pool keeps what it once held, so it is the in-use mark never reset.
  size_t pool_used = 0, pool_used_high = 0, pool_reserved = 0, pool_reserved_high = 0;
};

State& state() {
  static State* s = new State;  // NOTE: leaked on purpose: static destructors may still free
  return *s;
}

// True when [c, c + bytes) lies inside one block of `table` (start -> its size, as size_of reads
// it); with bytes 0, a pointer one past a block's end is inside it.
template <class Table, class SizeOf>
bool holds(const Table& table, const char* c, size_t bytes, SizeOf size_of) {
  auto it = table.upper_bound(c);
  if (it == table.begin()) return false;
  --it;
  return c + bytes <= it->first + size_of(it->second);
}
size_t allocation_bytes(const Allocation& a) { return a.bytes; }
size_t block_bytes(size_t bytes) { return bytes; }

}  // namespace

void unpoison_mapping(void* p, size_t bytes) { unpoison(p, bytes); }

bool is_device_range(const void* p, size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return holds(s.device, static_cast<const char*>(p), bytes, allocation_bytes);
}

namespace {

int device_count() {
  static const int n = static_cast<int>(env_number("ECHO_EMU_DEVICES", 1, 1, 16));
  return n;
}
bool device_ok(int device) { return device >= 0 && device < device_count(); }
// A host thread's first current device: 0, as the runtime's; with ECHO_EMU_DEFAULT_DEVICE=local_rank,
// the process's node-local MPI rank (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK) modulo the devices, as
// if the program had called cudaSetDevice(local_rank) first: the multi-rank tests that take the
// current device as they find it then run with one device per rank.
int first_device() {
  static const int d = [] {
    if (env_choice("ECHO_EMU_DEFAULT_DEVICE", {"0", "local_rank"}) == "0") return 0;
    return static_cast<int>(env_number("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, 1L << 20)) % device_count();
  }();
  return d;
}
thread_local int t_device = first_device();  // cudaSetDevice's, per host thread

// Records `error` for cudaGetLastError and returns it (the last error is this thread's: no lock).
cudaError_t fail_with(cudaError_t error) {
  t_last_error = error;
  return error;
}

// cudaMalloc (`stream` null) or cudaMallocAsync. Pool memory must not be touched before the
// allocating stream reaches the allocation ("cudaMallocAsync": on a GPU the block may be one a
// stream-ordered free gave back while its last readers still run): ASan poisons it until then.
cudaError_t allocate(void** p, size_t bytes, bool exportable, const cudaStream_t* stream = nullptr) {
  if (p == nullptr) return fail_with(cudaErrorInvalidValue);
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.used + bytes > kDeviceBytes) return fail_with(cudaErrorMemoryAllocation);
  }
  Allocation a;
  a.bytes = bytes;
  a.pooled = !exportable;
  void* block = nullptr;
  if (exportable && bytes % kIpcGranule == 0) {
    a.fd = memfd_create("echo-emulated-device", MFD_CLOEXEC);
    if (a.fd < 0 || ftruncate(a.fd, static_cast<off_t>(bytes)) != 0) {
      if (a.fd >= 0) close(a.fd);
      return fail_with(cudaErrorMemoryAllocation);
    }
    block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    if (block == MAP_FAILED) {
      close(a.fd);
      return fail_with(cudaErrorMemoryAllocation);
    }
    unpoison(block, bytes);
  } else {
    // NOTE: the exact size, so ASan's redzone starts right after the last byte and a kernel
    // reading past the end is named.
    if (posix_memalign(&block, kAlignment, bytes) != 0) return fail_with(cudaErrorMemoryAllocation);
  }
  // Fresh device memory holds whatever was there before: all-ones bytes here (NaN as f32 or
  // bf16, -1 as an integer), so a kernel that reads before anything wrote shows in its result.
  static std::atomic<uint64_t> allocations{0};
  a.id = ++allocations;
  if (stream == nullptr) {
    std::memset(block, 0xff, bytes);
  } else {
    poison(block, bytes);
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.device[static_cast<const char*>(block)] = a;
    s.used += bytes;
    if (a.pooled) {
      s.pool_used += bytes;
      s.pool_used_high = std::max(s.pool_used_high, s.pool_used);
      s.pool_reserved = std::max(s.pool_reserved, s.pool_used);
      s.pool_reserved_high = std::max(s.pool_reserved_high, s.pool_reserved);
    }
  }
  if (stream != nullptr) {  // after the table has it: the stream may get there at once
    const uint64_t id = a.id;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.awaiting_stream.insert(id);
    }
    issue(*stream, [block, bytes, id] {
      State& st = state();
      std::lock_guard<std::mutex> lock(st.mutex);
      if (st.awaiting_stream.erase(id) == 0) return;  // given back before its stream got here
      unpoison(block, bytes);
      std::memset(block, 0xff, bytes);
    });
  }
  *p = block;
  return cudaSuccess;
}

// Takes `p` out of the table of live device memory (and the pool's counts) at the call: later
// work given it is refused. False when `p` is not the start of a live allocation of this process.
bool forget_allocation(void* p, Allocation* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.device.find(static_cast<const char*>(p));
  if (it == s.device.end() || it->second.opened) return false;
  *out = it->second;
  s.used -= out->bytes;
  if (out->pooled) s.pool_used -= out->bytes;
  s.device.erase(it);
  return true;
}

// Gives the memory back to the host: when the free's stream reaches it (cudaFreeAsync), so work
// queued before it on that stream still has the memory, and work of another stream that was not
// ordered before it reads freed memory (ASan names it) as it would read another allocation's on a GPU.
void unmap_allocation(void* p, const Allocation& a) {
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.awaiting_stream.erase(a.id);
  }
  if (a.fd >= 0) {
    munmap(p, a.bytes);
    close(a.fd);
  } else {
    std::free(p);
  }
}

bool is_pooled(void* p) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.device.find(static_cast<const char*>(p));
  return it != s.device.end() && it->second.pooled;
}

// cudaFree (`stream` null) or cudaFreeAsync. cudaFree of cudaMalloc's memory waits for the device;
// of cudaMallocAsync's, it does not: the runtime assumes every access has completed (Programming
// Guide, "Stream Ordered Memory Allocator"), so a kernel still queued reads freed memory here.
cudaError_t release(void* p, const cudaStream_t* stream) {
  if (p == nullptr) return cudaSuccess;
  if (stream == nullptr && !is_pooled(p)) synchronize_all();
  Allocation a;
  if (!forget_allocation(p, &a)) return fail_with(cudaErrorInvalidValue);
  if (stream == nullptr) {
    unmap_allocation(p, a);
  } else {
    issue(
        *stream, [p, a] { unmap_allocation(p, a); }, false);
  }
  return cudaSuccess;
}

bool event_ok(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.events.count(event) > 0;
}

}  // namespace

// Where the event was last recorded (no stream: never).
StreamMark event_mark(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.events.find(event);
  return it == s.events.end() ? StreamMark{} : it->second.mark;
}

namespace {

bool is_pinned(const void* p, size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return holds(s.pinned, static_cast<const char*>(p), bytes, block_bytes);
}

// The rows of a copy: `height` rows of `width` bytes, `pitch` bytes apart (a plain copy is one row).
struct Rows {
  size_t width = 0, height = 1, dst_pitch = 0, src_pitch = 0;
  size_t span(size_t pitch) const { return pitch * (height - 1) + width; }  // bytes from the first to the last
};

// cudaMemcpy[2D] (`blocking_call`, on the legacy stream) and cudaMemcpy[2D]Async, with the host
// synchronization the runtime documents ("API synchronization behavior"): a copy between two
// host buffers is done at the call; one from pageable host memory is staged at the call (the
// caller may reuse its buffer at once) and reaches the device in stream order; one into pageable
// host memory, and cudaMemcpy into pinned memory or from pinned to device memory, returns when
// done; everything else (device to device, cudaMemcpyAsync with pinned memory) returns at once.
cudaError_t copy(void* dst, const void* src, Rows r, cudaMemcpyKind kind, cudaStream_t stream, bool blocking_call) {
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  if (r.width == 0 || r.height == 0) return cudaSuccess;
  if (r.height > 1 && (r.width > r.dst_pitch || r.width > r.src_pitch)) return fail_with(cudaErrorInvalidPitchValue);
  if (dst == nullptr || src == nullptr) return fail_with(cudaErrorInvalidValue);
  const size_t dst_span = r.span(r.dst_pitch), src_span = r.span(r.src_pitch);
  const bool dst_device = is_device_range(dst, dst_span);
  const bool src_device = is_device_range(src, src_span);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_device && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_device && src_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_device && src_device;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_device && !src_device;
      break;
    case cudaMemcpyDefault:
      ok = true;
      break;
  }
  if (!ok) {
    std::fprintf(stderr, "echo kernel emulator: cudaMemcpy kind %d does not match its pointers (dst %s, src %s)\n",
                 static_cast<int>(kind), dst_device ? "device" : "host", src_device ? "device" : "host");
    return fail_with(cudaErrorInvalidValue);
  }
  char* d = static_cast<char*>(dst);
  const char* c = static_cast<const char*>(src);
  const auto move_rows = [d, c, r] {
    for (size_t i = 0; i < r.height; ++i) std::memmove(d + i * r.dst_pitch, c + i * r.src_pitch, r.width);
  };
  if (!dst_device && !src_device) {
    move_rows();
    return cudaSuccess;
  }
  const bool dst_pinned = !dst_device && is_pinned(dst, dst_span);
  const bool src_pinned = !src_device && is_pinned(src, src_span);
  if (!src_device && !src_pinned) {
    auto staged = std::make_shared<std::vector<char>>(r.width * r.height);
    for (size_t i = 0; i < r.height; ++i) std::memcpy(staged->data() + i * r.width, c + i * r.src_pitch, r.width);
    issue(stream, [d, staged, r] {
      for (size_t i = 0; i < r.height; ++i) std::memcpy(d + i * r.dst_pitch, staged->data() + i * r.width, r.width);
    });
    return cudaSuccess;
  }
  const StreamMark done = issue(stream, move_rows);
  if ((!dst_device && !dst_pinned) || (blocking_call && (dst_pinned || src_pinned))) wait_until(done);
  return cudaSuccess;
}

// cudaMemset and cudaMemsetAsync: asynchronous for device memory, in stream order.
cudaError_t set(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (!is_device_range(p, bytes)) return fail_with(cudaErrorInvalidValue);
  issue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

// Destroys a stream or event handle (a `new char` standing for it) and forgets it; one this table
// does not hold is the runtime's invalid-handle error.
template <class Table, class Handle>
cudaError_t forget_handle(Table& table, Handle handle) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (table.erase(handle) == 0) {
    return fail_with(cudaErrorInvalidResourceHandle);
  }
  delete reinterpret_cast<char*>(handle);
  return cudaSuccess;
}

}  // namespace

void record_launch_error(cudaError_t error) { (void)fail_with(error); }

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void check_kernel_pointer(const char* kernel_name, int index, const void* p) {
  if (p == nullptr) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char* c = static_cast<const char*>(p);
  // NOTE: one past the end counts as inside (bytes 0): a kernel is often handed the end of an empty range.
  if (holds(s.device, c, 0, allocation_bytes) || holds(s.pinned, c, 0, block_bytes)) return;
  std::fprintf(stderr,
               "echo kernel emulator: kernel %s: pointer argument %d (%p) is not device memory (on a GPU: an "
               "illegal address)\n",
               kernel_name, index, p);
  std::fflush(stderr);
  std::abort();
}

void check_stream(cudaStream_t stream, const char* kernel_name) {
  if (stream_exists(stream)) return;
  std::fprintf(stderr, "echo kernel emulator: kernel %s launched on a stream that does not exist\n", kernel_name);
  std::abort();
}

std::string env_choice(const char* name, std::initializer_list<const char*> allowed) {
  const char* v = std::getenv(name);
  const std::string s = v == nullptr || v[0] == '\0' ? *allowed.begin() : v;
  std::string expected;
  for (const char* a : allowed) {
    if (s == a) return s;
    expected += expected.empty() ? a : std::string(", ") + a;
  }
  std::fprintf(stderr, "echo kernel emulator: %s=%s (expected one of %s)\n", name, s.c_str(), expected.c_str());
  std::exit(2);
}

long env_number(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || n < lo || n > hi) {
    std::fprintf(stderr, "echo kernel emulator: %s=%s (expected a whole number from %ld to %ld)\n", name, v, lo, hi);
    std::exit(2);
  }
  return n;
}

const std::string& thread_order() {
  static const std::string order = env_choice("ECHO_EMU_ORDER", {"alternate", "forward", "reverse", "shuffle"});
  return order;
}

}  // namespace echo::emu

using echo::emu::allocate;
using echo::emu::copy;
using echo::emu::event_ok;
using echo::emu::fail_with;
using echo::emu::forget_handle;
using echo::emu::release;
using echo::emu::Rows;
using echo::emu::set;
using echo::emu::state;
using echo::emu::stream_exists;
using echo::emu::StreamMark;
using echo::emu::t_last_error;

extern "C" {

// ECHO_EMU_DEVICES devices (default 1), all backed by the one host memory: with one per rank, the
// paths for ranks on distinct GPUs (NCCL, nccl_emu.cpp; peer access) run. The current device is
// each host thread's, as the runtime keeps it.
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail_with(cudaErrorInvalidValue);
  *count = echo::emu::device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail_with(cudaErrorInvalidValue);
  *device = echo::emu::t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!echo::emu::device_ok(device)) return fail_with(cudaErrorInvalidDevice);
  echo::emu::t_device = device;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  echo::emu::synchronize_all();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail_with(cudaErrorInvalidValue);
  if (!echo::emu::device_ok(device)) return fail_with(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "echo kernel emulator");
  // Device d is the same device in every process: the same UUID (never all zeros, which the IPC
  // workspace reads as "could not read").
  char uuid[17];
  std::snprintf(uuid, sizeof uuid, "echo-emulated-%02d", device % 100);
  std::memcpy(prop->uuid.bytes, uuid, 16);
  prop->totalGlobalMem = echo::emu::kDeviceBytes;
  prop->sharedMemPerBlock = echo::emu::kMaxSharedBytes;
  prop->warpSize = echo::emu::kWarpSize;
  prop->maxThreadsPerBlock = echo::emu::kMaxBlockThreads;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = echo::emu::kMaxBlockThreads;
  prop->maxThreadsDim[2] = echo::emu::kMaxBlockZ;
  prop->maxGridSize[0] = static_cast<int>(echo::emu::kMaxGridX);
  prop->maxGridSize[1] = prop->maxGridSize[2] = static_cast<int>(echo::emu::kMaxGridYZ);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int length, int device) {
  if (id == nullptr || length < 13) return fail_with(cudaErrorInvalidValue);
  if (!echo::emu::device_ok(device)) return fail_with(cudaErrorInvalidDevice);
  std::snprintf(id, static_cast<size_t>(length), "0000:%02x:00.0", device);
  return cudaSuccess;
}

// One default pool: cudaMallocAsync's memory; its attributes are the counts kept in allocate().
// NOTE: only the maximum release threshold (the CUDA backend's) is modelled: memory the pool
// once held stays reserved.
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return fail_with(cudaErrorInvalidValue);
  if (!echo::emu::device_ok(device)) return fail_with(cudaErrorInvalidDevice);
  static char the_pool;  // NOTE: one pool for all devices: each rank's process uses one of them
  *pool = reinterpret_cast<cudaMemPool_t>(&the_pool);
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr) return fail_with(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      if (*static_cast<uint64_t*>(value) != UINT64_MAX) break;  // not modelled: say so
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      if (*static_cast<uint64_t*>(value) != 0) break;  // the runtime accepts only a reset to 0
      s.pool_reserved_high = s.pool_reserved;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      if (*static_cast<uint64_t*>(value) != 0) break;
      s.pool_used_high = s.pool_used;
      return cudaSuccess;
    default:
      break;
  }
  return fail_with(cudaErrorInvalidValue);
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr) return fail_with(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
      v = s.pool_reserved;
      break;
    case cudaMemPoolAttrUsedMemCurrent:
      v = s.pool_used;
      break;
    case cudaMemPoolAttrReservedMemHigh:
      v = s.pool_reserved_high;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      v = s.pool_used_high;
      break;
    case cudaMemPoolAttrReleaseThreshold:
      v = UINT64_MAX;  // the only threshold set accepts
      break;
    default:
      return fail_with(cudaErrorInvalidValue);
  }
  *static_cast<uint64_t*>(value) = v;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last_error; }
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorInvalidPitchValue:
      return "cudaErrorInvalidPitchValue";
    default:
      return "cudaError (emulated)";
  }
}
const char* cudaGetErrorString(cudaError_t error) { return cudaGetErrorName(error); }

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, true); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  return allocate(p, bytes, false, &stream);  // pool memory: not exportable with the legacy IPC calls
}
cudaError_t cudaFree(void* p) { return release(p, nullptr); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  return release(p, &stream);
}
// Pinned host memory: kernels may read it (unified addressing), so it is kept in its own table.
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (p == nullptr) return fail_with(cudaErrorInvalidValue);
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  if (*p == nullptr) return fail_with(cudaErrorMemoryAllocation);
  std::memset(*p, 0xff, bytes);  // as fresh device memory: not zero by luck
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.pinned[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  echo::emu::synchronize_all();  // as cudaFree: no copy in flight still uses it
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.pinned.erase(static_cast<const char*>(p)) == 0) {
    return fail_with(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (free_bytes != nullptr) *free_bytes = echo::emu::kDeviceBytes - s.used;
  if (total_bytes != nullptr) *total_bytes = echo::emu::kDeviceBytes;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, Rows{bytes, 1, bytes, bytes}, kind, nullptr, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, Rows{bytes, 1, bytes, bytes}, kind, stream, false);
}
cudaError_t cudaMemcpy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  return copy(dst, src, Rows{width, height, dst_pitch, src_pitch}, kind, nullptr, true);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, Rows{width, height, dst_pitch, src_pitch}, kind, stream, false);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return set(p, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  return set(p, value, bytes, stream);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return fail_with(cudaErrorInvalidValue);
  *stream = reinterpret_cast<cudaStream_t>(new char);
  echo::emu::add_stream(*stream, (flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!echo::emu::remove_stream(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  echo::emu::synchronize(stream);
  return cudaSuccess;
}
// The wait is for the event's last record before this call, as the runtime's.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!stream_exists(stream) || !event_ok(event)) return fail_with(cudaErrorInvalidResourceHandle);
  echo::emu::issue_wait(stream, echo::emu::event_mark(event));
  return cudaSuccess;
}

// The host function runs on the stream's own thread in stream order, as the runtime runs it on a
// thread of its own ("cudaLaunchHostFunc": it must make no CUDA call).
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail_with(cudaErrorInvalidValue);
  if (!stream_exists(stream)) return fail_with(cudaErrorInvalidResourceHandle);
  echo::emu::issue(
      stream, [fn, user_data] { fn(user_data); }, false);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail_with(cudaErrorInvalidValue);
  *event = reinterpret_cast<cudaEvent_t>(new char);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.events[*event].flags = flags;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) { return forget_handle(state().events, event); }
// A record is work on the stream: the event completes, and takes its time, when the stream
// reaches it.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!stream_exists(stream) || !event_ok(event)) return fail_with(cudaErrorInvalidResourceHandle);
  auto& s = state();
  uint64_t record = 0;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    // NOTE: numbered across all events: a destroyed event's pending record must not pass for a
    // new event's that got the same handle.
    static uint64_t records = 0;
    auto& e = s.events[event];
    record = e.records = ++records;
    e.recorded_ns = 0;
  }
  const StreamMark mark = echo::emu::issue(
      stream,
      [event, record] {
        auto& st = state();
        std::lock_guard<std::mutex> lock(st.mutex);
        auto it = st.events.find(event);
        if (it != st.events.end() && it->second.records == record) it->second.recorded_ns = echo::emu::now_ns();
      },
      false);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.events.find(event);
  if (it != s.events.end() && it->second.records == record) it->second.mark = mark;
  return cudaSuccess;
}
// As the runtime: both events recorded and complete, neither made with cudaEventDisableTiming.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail_with(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto a = s.events.find(start), b = s.events.find(end);
  if (a == s.events.end() || b == s.events.end() || ((a->second.flags | b->second.flags) & cudaEventDisableTiming) ||
      a->second.records == 0 || b->second.records == 0)
    return fail_with(cudaErrorInvalidResourceHandle);
  if (a->second.recorded_ns == 0 || b->second.recorded_ns == 0) return fail_with(cudaErrorNotReady);
  *ms = static_cast<float>(static_cast<double>(b->second.recorded_ns - a->second.recorded_ns) * 1e-6);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event_ok(event)) return fail_with(cudaErrorInvalidResourceHandle);
  echo::emu::wait_until(echo::emu::event_mark(event));
  return cudaSuccess;
}
// NOTE: as the runtime, cudaErrorNotReady becomes the last error too (a caller polling must
// clear it, or the next launch check sees it; PyTorch's CUDAEvent::query does the same).
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event_ok(event)) return fail_with(cudaErrorInvalidResourceHandle);
  return echo::emu::reached(echo::emu::event_mark(event)) ? cudaSuccess : fail_with(cudaErrorNotReady);
}

// CUDA IPC between processes of this machine: a handle names the exporting process and the memfd
// of a whole-2-MiB cudaMalloc; opening it maps that memfd (through /proc/<pid>/fd) here.
struct EmulatedIpcHandle {
  uint64_t magic;
  int64_t pid;
  int64_t fd;
  uint64_t bytes;
};
static_assert(sizeof(EmulatedIpcHandle) <= sizeof(cudaIpcMemHandle_t));

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  if (handle == nullptr || p == nullptr) return fail_with(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.device.find(static_cast<const char*>(p));
  if (it == s.device.end() || it->second.fd < 0) {
    std::fprintf(stderr,
                 "echo kernel emulator: cudaIpcGetMemHandle of %p: only the start of a cudaMalloc of whole "
                 "2 MiB pages can be exported here\n",
                 p);
    return fail_with(cudaErrorInvalidValue);
  }
  const EmulatedIpcHandle h{echo::emu::kHandleMagic, static_cast<int64_t>(getpid()), it->second.fd, it->second.bytes};
  *handle = cudaIpcMemHandle_t{};
  std::memcpy(handle->reserved, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned int) {
  if (p == nullptr) return fail_with(cudaErrorInvalidValue);
  EmulatedIpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != echo::emu::kHandleMagic) return fail_with(cudaErrorInvalidValue);
  // NOTE: CUDA refuses to open a handle in the process that exported it.
  if (h.pid == static_cast<int64_t>(getpid())) return fail_with(cudaErrorDeviceUninitialized);
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "echo kernel emulator: cudaIpcOpenMemHandle: cannot open %s\n", path.c_str());
    return fail_with(cudaErrorInvalidValue);
  }
  void* mapped = mmap(nullptr, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory
  if (mapped == MAP_FAILED) return fail_with(cudaErrorMemoryAllocation);
  echo::emu::unpoison(mapped, h.bytes);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  echo::emu::Allocation a;
  a.bytes = h.bytes;
  a.opened = true;
  s.device[static_cast<const char*>(mapped)] = a;
  *p = mapped;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* p) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.device.find(static_cast<const char*>(p));
  if (it == s.device.end() || !it->second.opened) {
    return fail_with(cudaErrorInvalidValue);
  }
  munmap(p, it->second.bytes);
  s.device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return fail_with(cudaErrorInvalidValue);
  if (!echo::emu::device_ok(device) || !echo::emu::device_ok(peer)) return fail_with(cudaErrorInvalidDevice);
  *can = device != peer ? 1 : 0;  // as GPUs joined by NVLink; never a device with itself
  return cudaSuccess;
}

}  // extern "C"
