// LanePool: run one task on `lanes` threads at once, call after call, without starting threads
// per call. Lane 0 runs on the caller's thread; lanes 1.. run on worker threads started once by
// the constructor and parked on a condition variable between calls (a parked worker uses no CPU,
// which matters where ranks already outnumber cores). run() returns only after every lane has
// finished, so a task may refer to the caller's stack; if lanes threw, the error of the lowest
// such lane is rethrown then, and the pool stays usable. The destructor stops and joins the
// workers. One caller at a time: run() is neither reentrant nor meant for concurrent callers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace echo {

class LanePool {
 public:
  explicit LanePool(int lanes);
  ~LanePool();
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  int lanes() const { return lanes_; }

  // Calls task(lane) once for every lane in [0, lanes()), each lane on its own thread.
  template <class F>
  void run(F&& task) {
    using Task = std::remove_reference_t<F>;
    // Type-erased by hand rather than through std::function, which may allocate on every call.
    run_erased([](void* t, int lane) { (*static_cast<Task*>(t))(lane); }, const_cast<void*>(static_cast<const void*>(&task)));
  }

 private:
  using Invoke = void (*)(void* task, int lane);
  void run_erased(Invoke invoke, void* task);
  void work(int lane);
  void stop_workers();  // wakes the parked workers with stop_ and joins them

  const int lanes_;
  std::mutex mutex_;
  std::condition_variable start_;  // workers wait here for the next call (or for stop_)
  std::condition_variable done_;   // the caller waits here until pending_ reaches 0
  // Under mutex_: the current call, numbered so that a worker runs each call exactly once.
  uint64_t generation_ = 0;
  Invoke invoke_ = nullptr;
  void* task_ = nullptr;
  int pending_ = 0;  // workers still running the current call
  bool busy_ = false;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // per lane; written by that lane only during a call
  std::vector<std::thread> workers_;        // lanes 1..lanes-1
};

}  // namespace echo
