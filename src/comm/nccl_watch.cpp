// NcclWatch (comm/nccl_watch.h).
#include "comm/nccl_watch.h"

#include <fmt/format.h>

#include <utility>

#include "core/stopwatch.h"
#include "cuda_check.h"

namespace echo::comm {

NcclWatch::NcclWatch(int ranks) : ranks_(ranks) {
  CUDA_CHECK(cudaGetDevice(&device_));
  probe_ = dist::add_device_collective_probe([this] { return oldest_pending(); });
}

NcclWatch::~NcclWatch() {
  dist::remove_device_collective_probe(probe_);
  // NOTE: a destructor must not throw; the owner synchronized the streams, so the events are done.
  for (Call& c : pending_) cudaEventDestroy(c.done);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

void NcclWatch::enqueued(const char* op, size_t count, const std::string& unit, cudaStream_t stream) {
  if (!dist::device_collectives_watched()) return;
  std::string what = fmt::format("NCCL {} of {} {} over {} ranks", op, count, unit, ranks_);
  const std::lock_guard<std::mutex> lock(mutex_);
  // NOTE: retired by the watchdog's thread only (at most 0.1 s apart): a query here would have to
  // clear its "not ready" from this thread's last error, and with it a launch error not yet read.
  cudaEvent_t done = nullptr;
  if (free_.empty()) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = free_.back();
    free_.pop_back();
  }
  const cudaError_t recorded = cudaEventRecord(done, stream);
  if (recorded != cudaSuccess) {
    free_.push_back(done);
    CUDA_CHECK(recorded);
  }
  pending_.push_back(Call{next_id_++, std::move(what), steady_now_ns(), dist::collective_step(), done});
}

void NcclWatch::retire_done() {
  while (!pending_.empty()) {
    // NOTE: any answer but "not ready" retires the call: an error is the stream's, and the next
    // CUDA_CHECK on it reports it; the watch only tells a wait that never ends.
    const cudaError_t status = cudaEventQuery(pending_.front().done);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // the watchdog thread's own last error: nothing of the caller's
      return;
    }
    free_.push_back(pending_.front().done);
    pending_.pop_front();
  }
}

dist::PendingDeviceCollective NcclWatch::oldest_pending() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (pending_.empty()) return {};
  // NOTE: the watchdog thread's device is this communicator's before any query: a thread whose
  // first CUDA call finds device 0 current would make a context there, on every rank's GPU 0.
  if (cudaSetDevice(device_) != cudaSuccess) return {};
  retire_done();
  if (pending_.empty()) return {};
  const Call& c = pending_.front();
  return dist::PendingDeviceCollective{c.id, c.what, c.since_ns, c.step};
}

}  // namespace echo::comm
