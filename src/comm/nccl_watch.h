// NcclWatch: the collective watchdog's view of one NCCL communicator's calls (docs/design.md §3,
// "Stuck peers"). NCCL calls are enqueued on a stream and the host goes on, so a peer that never
// makes the same call leaves this GPU, and later the host, waiting with no timeout. After each call
// the watch records a CUDA event on its stream; the watchdog's thread (dist/collective_watchdog.h)
// asks for the oldest call whose event has not completed and ends the rank with a message naming
// it once it has lasted longer than comm.peer_timeout_s. Off (no events) while the watchdog is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "dist/collective_watchdog.h"

namespace echo::comm {

class NcclWatch {
 public:
  explicit NcclWatch(int ranks);  // the communicator's size, named in the message
  // Unregisters, then destroys its events (the caller has synchronized its streams).
  ~NcclWatch();
  NcclWatch(const NcclWatch&) = delete;
  NcclWatch& operator=(const NcclWatch&) = delete;

  // Call right after enqueuing a call on `stream`, from the thread that enqueued it; the message
  // names it "NCCL <op> of <count> <unit> over <ranks> ranks".
  void enqueued(const char* op, size_t count, const std::string& unit, cudaStream_t stream);

 private:
  struct Call {
    uint64_t id;
    std::string what;
    int64_t since_ns;
    int64_t step;
    cudaEvent_t done;
  };
  // Drops the calls at the front whose events have completed (their events go back to free_); on
  // the watchdog's thread only.
  void retire_done();
  dist::PendingDeviceCollective oldest_pending();

  std::mutex mutex_;
  std::deque<Call> pending_;  // in the order enqueued
  std::vector<cudaEvent_t> free_;
  uint64_t next_id_ = 1;
  int ranks_;
  int device_ = 0;  // the device current at construction, the communicator's
  uint64_t probe_ = 0;
};

}  // namespace echo::comm
