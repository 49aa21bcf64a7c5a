// The emulated device's streams (cuda_emu_streams.h): one host thread per stream runs its work in
// issue order; a mark is a count of completed pieces of work.
#include "cuda_emu_streams.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu_runtime.h"  // env_choice, env_number, thread_order

namespace echo::emu {
namespace {

const cudaStream_t kLegacyStream = reinterpret_cast<cudaStream_t>(0x1);     // cudaStreamLegacy
const cudaStream_t kPerThreadStream = reinterpret_cast<cudaStream_t>(0x2);  // cudaStreamPerThread

bool asynchronous() {
  static const bool async = env_choice("ECHO_EMU_STREAMS", {"async", "sync"}) == "async";
  return async;
}

long max_delay_us() {
  static const long us = env_number("ECHO_EMU_STREAM_DELAY_US", 200, 0, 1000000);
  return us;
}

// The delays' seed: ECHO_EMU_SEED, to replay an interleaving, or one from the process id.
unsigned base_seed() {
  static const unsigned seed = std::getenv("ECHO_EMU_SEED") != nullptr
                                   ? static_cast<unsigned>(env_number("ECHO_EMU_SEED", 0, 0, 0xffffffffL))
                                   : static_cast<unsigned>(getpid()) * 7919u;
  return seed;
}

}  // namespace

// One stream: a queue of work and the thread that runs it. In sync mode there is no thread: work
// runs when pushed.
class Stream {
 public:
  Stream(bool blocking, unsigned seed) : blocking_(blocking), rng_(seed) {
    if (asynchronous()) worker_ = std::thread([this] { run(); });
  }
  // NOTE: only ever destroyed by remove_stream, which has waited for the queue to empty.
  ~Stream() {
    if (worker_.joinable() && worker_.get_id() == std::this_thread::get_id()) {
      std::fprintf(stderr, "echo kernel emulator: a stream destroyed on its own thread\n");
      std::abort();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  bool blocking() const { return blocking_; }

  // Queues `work`; returns the position just after it.
  uint64_t push(std::function<void()> work, bool delayed) {
    if (!asynchronous()) {
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      ++completed_;
      return ++issued_;
    }
    uint64_t position = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(Item{std::move(work), delayed});
      position = ++issued_;
    }
    changed_.notify_all();
    return position;
  }

  uint64_t issued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_;
  }
  bool reached(uint64_t position) {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= position;
  }
  void wait(uint64_t position) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return completed_ >= position; });
  }

 private:
  struct Item {
    std::function<void()> work;
    bool delayed = false;
  };

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (item.delayed && max_delay_us() > 0) {
        std::uniform_int_distribution<long> us(0, max_delay_us());
        std::this_thread::sleep_for(std::chrono::microseconds(us(rng_)));
      }
      item.work();
      // NOTE: the work may hold the last reference to this stream (a wait for one of its own marks,
      // its stream and event destroyed meanwhile): drop it before saying it completed, so the
      // stream is never destroyed on its own thread.
      item = Item{};
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++completed_;
      }
      changed_.notify_all();
    }
  }

  const bool blocking_;
  std::mt19937 rng_;  // this stream's delays (used by its worker only)
  std::mutex mutex_;
  std::condition_variable changed_;  // work queued, work completed, or stop
  std::deque<Item> queue_;
  uint64_t issued_ = 0, completed_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

namespace {

struct Registry {
  // Held while issuing: the legacy stream's implicit ordering reads every blocking stream's
  // position and queues on each of them as one step.
  std::mutex mutex;
  std::shared_ptr<Stream> legacy, per_thread;
  std::map<cudaStream_t, std::shared_ptr<Stream>> created;
  unsigned next_seed = 0;
};

Registry& registry() {
  // NOTE: leaked on purpose, as the runtime's state: the stream threads outlive static destructors.
  static Registry* r = [] {
    // The settings are read here, on the host thread: a bad value ends the program before any
    // stream thread runs.
    (void)asynchronous();
    (void)max_delay_us();
    (void)thread_order();
    auto* reg = new Registry;
    const unsigned base = base_seed();
    reg->legacy = std::make_shared<Stream>(true, base + 1);
    reg->per_thread = std::make_shared<Stream>(true, base + 2);
    reg->next_seed = base + 3;
    return reg;
  }();
  return *r;
}

bool is_legacy(cudaStream_t handle) { return handle == nullptr || handle == kLegacyStream; }

// The stream a handle names, or null. Caller holds the registry's mutex.
std::shared_ptr<Stream> find(Registry& r, cudaStream_t handle) {
  if (is_legacy(handle)) return r.legacy;
  if (handle == kPerThreadStream) return r.per_thread;
  auto it = r.created.find(handle);
  return it == r.created.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Stream>> blocking_streams(Registry& r) {
  std::vector<std::shared_ptr<Stream>> out{r.per_thread};
  for (auto& [handle, s] : r.created)
    if (s->blocking()) out.push_back(s);
  return out;
}

std::function<void()> waiter(const StreamMark& mark) {
  return [mark] { mark.stream->wait(mark.position); };
}

[[noreturn]] void no_such_stream(cudaStream_t handle) {
  std::fprintf(stderr, "echo kernel emulator: work issued on stream %p, which does not exist\n",
               static_cast<void*>(handle));
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void add_stream(cudaStream_t handle, bool blocking) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto s = std::make_shared<Stream>(blocking, r.next_seed++);
  // A blocking stream's work waits for the legacy stream's earlier work, however new the stream.
  if (blocking) s->push(waiter(StreamMark{r.legacy, r.legacy->issued()}), false);
  r.created[handle] = s;
}

bool remove_stream(cudaStream_t handle) {
  Registry& r = registry();
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.created.find(handle);
    if (it == r.created.end()) return false;
    s = it->second;
    r.created.erase(it);
  }
  // NOTE: the runtime returns at once and frees the stream when its work is done; waiting here
  // keeps a mark on it (a recorded event) meaningful without keeping its thread.
  s->wait(s->issued());
  return true;
}

bool stream_exists(cudaStream_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return find(r, handle) != nullptr;
}

StreamMark issue(cudaStream_t handle, std::function<void()> work, bool delayed) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  std::shared_ptr<Stream> s = find(r, handle);
  if (s == nullptr) no_such_stream(handle);
  if (!is_legacy(handle) || !asynchronous()) {
    lock.unlock();  // sync mode runs the work in push: not under the registry's lock
    return StreamMark{s, s->push(std::move(work), delayed)};
  }
  // The legacy default stream: after everything the blocking streams were given so far, and
  // before anything they are given later.
  const std::vector<std::shared_ptr<Stream>> blocking = blocking_streams(r);
  for (const auto& b : blocking) s->push(waiter(StreamMark{b, b->issued()}), false);
  const StreamMark done{s, s->push(std::move(work), delayed)};
  for (const auto& b : blocking) b->push(waiter(done), false);
  return done;
}

void issue_wait(cudaStream_t handle, const StreamMark& mark) {
  if (mark.stream == nullptr) return;  // an event never recorded: nothing to wait for
  issue(handle, waiter(mark), false);
}

bool reached(const StreamMark& mark) { return mark.stream == nullptr || mark.stream->reached(mark.position); }

void wait_until(const StreamMark& mark) {
  if (mark.stream != nullptr) mark.stream->wait(mark.position);
}

void synchronize(cudaStream_t handle) {
  if (is_legacy(handle)) {
    wait_until(issue(
        handle, [] {}, false));
    return;
  }
  std::shared_ptr<Stream> s;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    s = find(r, handle);
  }
  if (s == nullptr) no_such_stream(handle);
  s->wait(s->issued());
}

void synchronize_all() {
  std::vector<StreamMark> marks;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    marks.push_back(StreamMark{r.legacy, r.legacy->issued()});
    marks.push_back(StreamMark{r.per_thread, r.per_thread->issued()});
    for (auto& [handle, s] : r.created) marks.push_back(StreamMark{s, s->issued()});
  }
  for (const StreamMark& m : marks) wait_until(m);
}

}  // namespace echo::emu
