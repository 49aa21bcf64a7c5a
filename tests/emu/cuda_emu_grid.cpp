// The kernel emulator's scheduler (tests/emu/cuda_emu.h, docs/design.md §15b): the blocks of a
// grid run one after another; the threads of a block are Boost.Context fibers of the calling OS thread,
// run in the order ECHO_EMU_ORDER names until each returns or waits at a barrier, and a barrier
// opens when every live thread it covers has arrived.
#if defined(__SANITIZE_ADDRESS__)
#define BOOST_USE_ASAN 1  // Boost.Context tells ASan about each stack switch
#include <sanitizer/asan_interface.h>
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu.h"
#include "cuda_emu_runtime.h"

namespace echo::emu {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;  // ASan's redzones make frames larger
constexpr size_t kSlotBytes = 16;

enum class State { ready, at_block_barrier, at_warp_barrier, done };

// One mmap'd stack with a guard page below it (an overflow faults instead of corrupting a
// neighbour).
class Stack {
 public:
  Stack() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    base_ =
        mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) {
      std::perror("echo kernel emulator: mmap of a fiber stack");
      std::abort();
    }
    mprotect(base_, page, PROT_NONE);
    bottom_ = static_cast<char*>(base_) + page;
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(bottom_, kStackBytes);  // a reused range may carry an old shadow
#endif
    mapped_ = kStackBytes + page;
  }
  // NOTE: the stack's shadow is cleared before the range goes back: ASan keeps an unmapped range's
  // shadow, so the kernels' stack redzones left here would poison whatever mmap hands out there
  // next (a stream's thread, and its stacks, end with cudaStreamDestroy; MPI's shared window was
  // reported as a stack-buffer-underflow).
  ~Stack() {
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(bottom_, kStackBytes);
#endif
    munmap(base_, mapped_);
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  // Boost.Context's StackAllocator: the same stack for each fiber that runs thread i of a block.
  struct Lender {
    Stack* stack;
    boost::context::stack_context allocate() const {
      boost::context::stack_context sc;
      sc.size = kStackBytes;
      sc.sp = static_cast<char*>(stack->bottom_) + kStackBytes;
      return sc;
    }
    void deallocate(boost::context::stack_context&) const noexcept {}
  };

 private:
  void* base_ = nullptr;
  void* bottom_ = nullptr;
  size_t mapped_ = 0;
};

struct Fiber {
  boost::context::fiber self;       // resumed by the scheduler
  boost::context::fiber scheduler;  // resumed by the fiber to yield
  ThreadContext thread{};
  State state = State::ready;
  bool exchange_parity = false;   // which of its warp's two slot sets the next exchange uses
  std::source_location waits_at;  // the barrier or shuffle it waits at
};

// One block in flight on this OS thread.
struct Block {
  const char* kernel_name = "";
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  int current = -1;
  std::vector<unsigned char> slots;  // 2 * kWarpSize * kSlotBytes per warp
};

thread_local Block* t_block = nullptr;
thread_local std::vector<std::unique_ptr<Stack>> t_stacks;

[[noreturn]] void fail(const std::string& what) {
  const Block* b = t_block;
  std::string where;
  if (b != nullptr && b->current >= 0) {
    const ThreadContext& t = b->fibers[static_cast<size_t>(b->current)].thread;
    where = " block (" + std::to_string(t.block_idx.x) + "," + std::to_string(t.block_idx.y) + "," +
            std::to_string(t.block_idx.z) + ") thread (" + std::to_string(t.thread_idx.x) + "," +
            std::to_string(t.thread_idx.y) + "," + std::to_string(t.thread_idx.z) + ")";
  }
  std::fprintf(stderr, "echo kernel emulator: kernel %s%s: %s\n", b != nullptr ? b->kernel_name : "?", where.c_str(),
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

void switch_to_fiber(Block& b, int index) {
  Fiber& f = b.fibers[static_cast<size_t>(index)];
  b.current = index;
  f.self = std::move(f.self).resume();
  b.current = -1;
}

// From the running fiber back to the scheduler; returns when the scheduler resumes it.
void yield_to_scheduler(Block& b) {
  Fiber& f = b.fibers[static_cast<size_t>(b.current)];
  f.scheduler = std::move(f.scheduler).resume();
}

boost::context::fiber make_fiber(Block& b, size_t index) {
  return boost::context::fiber(std::allocator_arg, Stack::Lender{t_stacks[index].get()},
                               [&b, index](boost::context::fiber&& scheduler) {
                                 Fiber& f = b.fibers[index];
                                 f.scheduler = std::move(scheduler);
                                 (*b.body)();
                                 f.state = State::done;
                                 return std::move(f.scheduler);
                               });
}

// The order the threads of one block run in. "alternate" (the default) runs the blocks of a grid
// forward and backward in turn, and a one-block kernel's launches likewise (counted per kernel), so
// a missing barrier shows whichever side of it the writer is on.
std::vector<int> run_order(int threads, bool backward) {
  std::vector<int> order(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) order[static_cast<size_t>(i)] = i;
  const std::string& mode = thread_order();
  if (mode == "reverse" || (mode == "alternate" && backward)) {
    std::reverse(order.begin(), order.end());
  } else if (mode == "shuffle") {
    static thread_local std::mt19937 rng(12345);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

std::string state_counts(const Block& b, size_t first, size_t last) {
  int counts[4] = {0, 0, 0, 0};
  for (size_t i = first; i < last; ++i) ++counts[static_cast<int>(b.fibers[i].state)];
  return std::to_string(counts[0]) + " running, " + std::to_string(counts[1]) + " at __syncthreads, " +
         std::to_string(counts[2]) + " in a warp shuffle, " + std::to_string(counts[3]) + " returned";
}

std::string site_text(const std::source_location& w) {
  return std::string(w.file_name()) + ":" + std::to_string(w.line());
}

// Every fiber of [first, last) waits at the same place in the source (they are all waiting).
void check_one_site(const Block& b, size_t first, size_t last, const char* what) {
  const std::source_location& a = b.fibers[first].waits_at;
  for (size_t i = first + 1; i < last; ++i) {
    const std::source_location& w = b.fibers[i].waits_at;
    if (w.line() != a.line() || std::strcmp(w.file_name(), a.file_name()) != 0)
      fail(std::string(what) + " pairs threads waiting at different places: thread " + std::to_string(first) + " at " +
           site_text(a) + ", thread " + std::to_string(i) + " at " + site_text(w));
  }
}

// Opens the block barrier when every live thread waits at it; a thread that returned while
// others wait is a divergent __syncthreads (undefined on the GPU). True when it opened.
bool open_block_barrier(Block& b) {
  size_t waiting = 0, done = 0;
  for (const Fiber& f : b.fibers) {
    if (f.state == State::at_block_barrier) ++waiting;
    if (f.state == State::done) ++done;
  }
  if (waiting == 0 || waiting + done != b.fibers.size()) return false;
  if (done > 0) {
    fail("__syncthreads reached by " + std::to_string(waiting) + " threads after " + std::to_string(done) +
         " threads of the block returned (a barrier not every thread reaches)");
  }
  check_one_site(b, 0, b.fibers.size(), "__syncthreads");
  for (Fiber& f : b.fibers) f.state = State::ready;
  return true;
}

// Opens each warp's exchange barrier when all 32 lanes wait at it; a lane that returned while
// the others wait is a shuffle with the full mask over an exited lane (undefined on the GPU).
// True when any opened.
bool open_warp_barriers(Block& b) {
  bool opened = false;
  const size_t n = b.fibers.size();
  for (size_t first = 0; first < n; first += kWarpSize) {
    const size_t last = std::min(n, first + kWarpSize);
    size_t waiting = 0, done = 0, first_done = 0;
    for (size_t i = first; i < last; ++i) {
      waiting += b.fibers[i].state == State::at_warp_barrier;
      if (b.fibers[i].state == State::done && done++ == 0) first_done = i - first;
    }
    if (waiting == 0) continue;
    if (waiting + done == last - first && done > 0)
      fail("__shfl_xor_sync with the full mask after lane " + std::to_string(first_done) + " returned (warp " +
           std::to_string(first / kWarpSize) + ")");
    if (waiting != last - first) continue;  // the deadlock check names a lane that never comes
    check_one_site(b, first, last, "the shuffle");
    for (size_t i = first; i < last; ++i) b.fibers[i].state = State::ready;
    opened = true;
  }
  return opened;
}

void run_block(Block& b, const std::vector<int>& order) {
  for (size_t i = 0; i < b.fibers.size(); ++i) {
    b.fibers[i].state = State::ready;
    b.fibers[i].exchange_parity = false;
    b.fibers[i].self = make_fiber(b, i);
  }
  for (;;) {
    bool ran = false;
    for (int index : order) {
      if (b.fibers[static_cast<size_t>(index)].state != State::ready) continue;
      switch_to_fiber(b, index);
      ran = true;
    }
    const bool all_done =
        std::all_of(b.fibers.begin(), b.fibers.end(), [](const Fiber& f) { return f.state == State::done; });
    if (all_done) return;
    const bool opened_warp = open_warp_barriers(b);
    const bool opened_block = open_block_barrier(b);
    if (!ran && !opened_warp && !opened_block) {
      fail("deadlock: " + state_counts(b, 0, b.fibers.size()) +
           " (threads wait at different barriers, or a shuffle's warp has a lane that never comes)");
    }
  }
}

bool launch_shape_ok(dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && block.x >= 1 && block.y >= 1 && block.z >= 1 &&
         grid.x <= kMaxGridX && grid.y <= kMaxGridYZ && grid.z <= kMaxGridYZ && block.z <= kMaxBlockZ &&
         threads <= kMaxBlockThreads && shared_bytes <= kMaxSharedBytes;
}

// Runs body() once per thread of every block of the grid, on the calling (the stream's) thread.
void run_grid(const char* kernel_name, dim3 grid, dim3 block, const std::function<void()>& body) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  while (t_stacks.size() < static_cast<size_t>(threads)) t_stacks.push_back(std::make_unique<Stack>());

  Block b;
  b.kernel_name = kernel_name;
  b.body = &body;
  b.fibers.resize(static_cast<size_t>(threads));
  b.slots.assign(static_cast<size_t>(threads + kWarpSize) * 2 * kSlotBytes, 0);
  const std::vector<int> orders[2] = {run_order(threads, false), run_order(threads, true)};
  static thread_local std::map<std::string, uint64_t> launches;  // per kernel, for "alternate"
  uint64_t which = launches[kernel_name]++;
  t_block = &b;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx, ++which) {
        for (int t = 0; t < threads; ++t) {
          ThreadContext& c = b.fibers[static_cast<size_t>(t)].thread;
          c.thread_idx = uint3{static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
                               static_cast<unsigned>(t) / (block.x * block.y)};
          c.block_idx = uint3{bx, by, bz};
          c.block_dim = block;
          c.grid_dim = grid;
        }
        run_block(b, orders[which % 2]);
      }
  t_block = nullptr;
}

}  // namespace

void launch(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            std::function<void()> body) {
  if (!launch_shape_ok(grid, block, shared_bytes)) {
    record_launch_error(cudaErrorInvalidConfiguration);
    return;
  }
  check_stream(stream, kernel_name);
  if (t_block != nullptr) fail(std::string("launch of ") + kernel_name + " from inside a kernel");
  issue(stream, [kernel_name, grid, block, body = std::move(body)] { run_grid(kernel_name, grid, block, body); });
}

void kernel_error(const std::string& what) { fail(what); }

const ThreadContext& current_thread() {
  const Block* b = t_block;
  if (b == nullptr || b->current < 0) fail("a built-in variable (threadIdx, blockIdx, ...) read outside a kernel");
  return b->fibers[static_cast<size_t>(b->current)].thread;
}

int current_lane() {
  const Block* b = t_block;
  if (b == nullptr || b->current < 0) fail("a warp operation outside a kernel");
  return b->current % kWarpSize;
}

void nap() {
  std::this_thread::yield();
  Block* b = t_block;
  if (b == nullptr || b->current < 0) return;
  yield_to_scheduler(*b);  // still ready: it runs again in the scheduler's next sweep
}

void sync_block(std::source_location where) {
  Block* b = t_block;
  if (b == nullptr || b->current < 0) fail("__syncthreads outside a kernel");
  b->fibers[static_cast<size_t>(b->current)].state = State::at_block_barrier;
  b->fibers[static_cast<size_t>(b->current)].waits_at = where;
  yield_to_scheduler(*b);
}

void warp_exchange(const void* mine, void* out, int src_lane, size_t bytes, unsigned mask, const char* what,
                   std::source_location where) {
  Block* b = t_block;
  if (b == nullptr || b->current < 0) fail(std::string(what) + " outside a kernel");
  const size_t index = static_cast<size_t>(b->current);
  const size_t warp_first = index / kWarpSize * kWarpSize;
  if (mask != 0xffffffffu) fail(std::string(what) + " with a partial mask is not emulated");
  if (warp_first + kWarpSize > b->fibers.size())
    fail(std::string(what) + " with the full mask in a warp of " + std::to_string(b->fibers.size() - warp_first) +
         " threads (lanes that do not exist cannot take part)");
  if (bytes > kSlotBytes) fail(std::string(what) + " of a value wider than 16 bytes");
  // NOTE: two slot sets used in turn, so one barrier per exchange is enough: a lane writes set
  // `parity` again only after the next exchange's barrier, which every lane reaches after reading.
  Fiber& me = b->fibers[index];
  const size_t lane = index - warp_first;
  unsigned char* slots = b->slots.data() + (warp_first * 2 + (me.exchange_parity ? kWarpSize : 0)) * kSlotBytes;
  me.exchange_parity = !me.exchange_parity;
  std::memcpy(slots + lane * kSlotBytes, mine, bytes);
  me.state = State::at_warp_barrier;
  me.waits_at = where;
  yield_to_scheduler(*b);
  std::memcpy(out, slots + static_cast<size_t>(src_lane) * kSlotBytes, bytes);
}

}  // namespace echo::emu
