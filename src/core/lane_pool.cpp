// The workers' loop and the hand-over of a call: one mutex, two condition variables.
#include "core/lane_pool.h"

#include "core/error.h"

namespace echo {

LanePool::LanePool(int lanes) : lanes_(lanes), errors_(static_cast<size_t>(lanes > 0 ? lanes : 0)) {
  ECHO_CHECK(lanes >= 1, "a lane pool needs at least one lane, not {}", lanes);
  workers_.reserve(static_cast<size_t>(lanes - 1));
  try {
    for (int lane = 1; lane < lanes; ++lane) workers_.emplace_back([this, lane] { work(lane); });
  } catch (...) {
    stop_workers();  // a thread that could not start: no destructor will run, so stop the ones that did
    throw;
  }
}

// run() never returns (nor throws) while a call is in flight, so every worker is parked here.
LanePool::~LanePool() { stop_workers(); }

void LanePool::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& w : workers_) w.join();
}

void LanePool::run_erased(Invoke invoke, void* task) {
  if (lanes_ == 1) {  // nothing to hand over: the caller's own thread, its exception as thrown
    invoke(task, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    ECHO_CHECK(!busy_, "LanePool::run called while a call is in flight (from a task, or from two threads)");
    busy_ = true;
    invoke_ = invoke;
    task_ = task;
    pending_ = lanes_ - 1;
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  start_.notify_all();

  // Lane 0 here. Its error waits like the others': the workers may still use the task, which
  // lives on the caller's stack, until pending_ is 0.
  try {
    invoke(task, 0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }

  std::exception_ptr first;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    busy_ = false;
    task_ = nullptr;
    for (auto& e : errors_)
      if (e && !first) first = e;
  }
  if (first) std::rethrow_exception(first);
}

void LanePool::work(int lane) {
  uint64_t seen = 0;  // the last call this worker ran
  for (;;) {
    Invoke invoke;
    void* task;
    {
      std::unique_lock lock(mutex_);
      // A call never starts before every worker finished the previous one (run waits for
      // pending_ == 0), so generation_ is at most one ahead of seen and no call is skipped.
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      invoke = invoke_;
      task = task_;
    }
    try {
      invoke(task, lane);
    } catch (...) {
      errors_[static_cast<size_t>(lane)] = std::current_exception();  // read by run() after the lock below
    }
    bool last;
    {
      std::lock_guard lock(mutex_);
      last = --pending_ == 0;
    }
    // Outside the lock, so the woken caller need not wait for it; the pool cannot be destroyed
    // in between, as its destructor joins this thread before done_ goes.
    if (last) done_.notify_one();
  }
}

}  // namespace echo
