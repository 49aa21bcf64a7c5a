// NcclWatch: the collective watchdog's view of one NCCL communicator's calls (docs/design.md §3,
// "Stuck peers"). NCCL calls are enqueued on a stream and the host goes on, so a peer that never
// makes the same call leaves this GPU, and later the host, waiting with no timeout. Each call is
// bracketed by two CUDA events on its stream: "reached" (recorded before it) and "done" (after).
// The device watch thread (dist/collective_watchdog.h) asks for the oldest call whose "done" has
// not completed; once its "reached" has, the GPU is in that call, waiting on the peers, and the
// watchdog ends the rank naming it after comm.peer_timeout_s. The host side of each call runs in
// a CollectiveScope: a communicator's first calls connect to the peers, and NCCL waits for them
// there. Nothing is recorded while the watchdog is off.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dist/collective_watchdog.h"

namespace echo::comm {

class NcclWatch {
 public:
  // `ranks` and `members_id` (dist::Communicator::members_id()): the communicator's, for the messages.
  NcclWatch(int ranks, uint64_t members_id);
  // Unregisters, then destroys its events (a pending one is released when its stream passes it).
  ~NcclWatch();
  NcclWatch(const NcclWatch&) = delete;
  NcclWatch& operator=(const NcclWatch&) = delete;

  // Runs `enqueue` (which enqueues one NCCL call, or one group of them, on `stream`) watched; the
  // message names it "NCCL <op> of <count> <unit> over <ranks> ranks". Call from the thread that
  // enqueues. Nothing is watched for a count of 0.
  template <class Enqueue>
  void run(const char* op, size_t count, const std::string& unit, cudaStream_t stream, Enqueue&& enqueue) {
    if (!dist::device_collectives_watched() || count == 0) {
      std::forward<Enqueue>(enqueue)();
      return;
    }
    const dist::CollectiveScope host_side(
        "an NCCL call on the host (a communicator's first calls connect to the peers)", members_id_);
    const Events events = record_reached(stream);
    try {
      std::forward<Enqueue>(enqueue)();
    } catch (...) {
      give_back(events);
      throw;
    }
    record_done(events, op, count, unit, stream);
  }

 private:
  struct Events {
    cudaEvent_t reached = nullptr;
    cudaEvent_t done = nullptr;
  };
  struct Call {
    uint64_t id;
    std::string what;
    int64_t step;
    Events events;
    bool reached = false;  // the device watch thread saw "reached" complete (that thread only)
  };
  Events record_reached(cudaStream_t stream);
  void record_done(const Events& events, const char* op, size_t count, const std::string& unit, cudaStream_t stream);
  void give_back(const Events& events);
  // The device watch thread's probe: retires the calls whose "done" has completed, then names the
  // oldest left if the GPU has reached it.
  dist::PendingDeviceCollective oldest_reached();

  int ranks_;
  uint64_t members_id_;
  int device_ = 0;  // the device current at construction, the communicator's
  std::mutex mutex_;
  // In the order enqueued. NOTE: only the probe pops, and a deque's push_back keeps references to
  // its elements, so the probe queries the front's events outside the lock.
  std::deque<Call> pending_;
  std::vector<cudaEvent_t> free_;
  uint64_t next_id_ = 1;
  uint64_t probe_ = 0;
  dist::PendingDeviceCollective last_answer_;  // the probe's, kept for a look that finds mutex_ busy
};

}  // namespace echo::comm
