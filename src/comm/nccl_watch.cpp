// NcclWatch (comm/nccl_watch.h).
#include "comm/nccl_watch.h"

#include <fmt/format.h>

#include "cuda_check.h"

namespace echo::comm {

NcclWatch::NcclWatch(int ranks, uint64_t members_id) : ranks_(ranks), members_id_(members_id) {
  CUDA_CHECK(cudaGetDevice(&device_));
  probe_ = dist::add_device_collective_probe([this] { return oldest_reached(); });
}

NcclWatch::~NcclWatch() {
  dist::remove_device_collective_probe(probe_);
  // NOTE: a destructor must not throw; destroying a pending event is allowed (released when done).
  for (Call& c : pending_) {
    cudaEventDestroy(c.events.reached);
    cudaEventDestroy(c.events.done);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

NcclWatch::Events NcclWatch::record_reached(cudaStream_t stream) {
  Events events;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (cudaEvent_t* e : {&events.reached, &events.done}) {
      if (free_.empty()) break;
      *e = free_.back();
      free_.pop_back();
    }
  }
  // NOTE: CUDA calls outside the lock: one that blocks (a launch queue full behind a hung call)
  // must not hold up the probe.
  for (cudaEvent_t* e : {&events.reached, &events.done}) {
    if (*e != nullptr) continue;
    const cudaError_t made = cudaEventCreateWithFlags(e, cudaEventDisableTiming);
    if (made != cudaSuccess) {
      give_back(events);
      CUDA_CHECK(made);
    }
  }
  const cudaError_t recorded = cudaEventRecord(events.reached, stream);
  if (recorded != cudaSuccess) {
    give_back(events);
    CUDA_CHECK(recorded);
  }
  return events;
}

void NcclWatch::record_done(const Events& events, const char* op, size_t count, const std::string& unit,
                            cudaStream_t stream) {
  const cudaError_t recorded = cudaEventRecord(events.done, stream);
  if (recorded != cudaSuccess) {
    give_back(events);
    CUDA_CHECK(recorded);
  }
  std::string what = fmt::format("NCCL {} of {} {} over {} ranks", op, count, unit, ranks_);
  const std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(Call{next_id_++, std::move(what), dist::collective_step(), events});
}

void NcclWatch::give_back(const Events& events) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (cudaEvent_t e : {events.reached, events.done})
    if (e != nullptr) free_.push_back(e);
}

// "Not ready" is also left as the calling thread's last error (as the runtime does): this is the
// device watch thread, whose last error is its own, so it is cleared here.
static bool completed(cudaEvent_t event) {
  // NOTE: any answer but "not ready" counts as completed: an error is the stream's, and the main
  // thread's next CUDA_CHECK reports it; the watch only tells a wait that never ends.
  if (cudaEventQuery(event) != cudaErrorNotReady) return true;
  (void)cudaGetLastError();
  return false;
}

dist::PendingDeviceCollective NcclWatch::oldest_reached() {
  // NOTE: this thread's device is the communicator's before any query: a thread whose first CUDA
  // call finds device 0 current would make a context there, on every rank's GPU 0. A device that
  // refuses is broken, which the main thread's next CUDA call reports.
  if (cudaSetDevice(device_) != cudaSuccess) return last_answer_ = {};
  Call* front = nullptr;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
      if (!lock.owns_lock()) return last_answer_;  // an enqueue holds it for a moment
      if (pending_.empty()) return last_answer_ = {};
      front = &pending_.front();
    }
    if (!completed(front->events.done)) break;
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(front->events.reached);
    free_.push_back(front->events.done);
    pending_.pop_front();
  }
  if (!front->reached) front->reached = completed(front->events.reached);
  if (!front->reached) return last_answer_ = {};  // still in this GPU's earlier work: no peer's wait
  return last_answer_ = dist::PendingDeviceCollective{front->id, front->what, front->step};
}

}  // namespace echo::comm
