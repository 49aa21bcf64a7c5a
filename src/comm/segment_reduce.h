// The engine under every host all-reduce (docs/design.md §7, QAR): x <- the sum over the group,
// owner by owner, each value encoded at most twice with the given codec. Two transports move
// the same bytes and give the same bits: `mpi` (TwoPhaseReduce: an all-to-all and an all-gather,
// within and across nodes) and `shm` (ShmPipelinedReduce: the tiled push / reduce / gather /
// tail pipeline over shared memory, one node).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "comm/all_reduce.h"
#include "comm/codec.h"
#include "dist/communicator.h"

namespace echo::comm {

// Where a rank's time in the engine went since the last reset (echo_bench prints the split).
// The MPI engine counts its two collectives as copy (they include the waiting); the shm engine
// tells its flag polling (wait) apart from its copies into peers.
struct EngineTimes {
  double encode_s = 0;  // quantizing the pushed segments and the owner's sum
  double reduce_s = 0;  // the owner's own values plus the decoded copies, in fp32
  double copy_s = 0;    // moving bytes to peers
  double decode_s = 0;  // decoding the gathered sums into x
  double wait_s = 0;    // waiting for peers
  int calls = 0;
};

class SegmentReduce {
 public:
  virtual ~SegmentReduce() = default;
  // x <- sum over ranks, in place. Returns the number of bad output entries (poisoned groups or
  // non-finite values), the same number on every rank. `site` names the call in errors.
  virtual size_t run(std::span<float> x, const SegmentCodec& codec, Site site) = 0;
  virtual const dist::Communicator& comm() const = 0;
  virtual const char* transport() const = 0;

  const EngineTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

 protected:
  EngineTimes times_;
};

enum class TransportKind { mpi, shm, automatic };

struct TransportOptions {
  TransportKind kind = TransportKind::mpi;
  double peer_timeout_s = 300;  // shm: how long a wait for a peer lasts before it is an error
};

// The engine for `group`. shm (and automatic) need every rank of the group on one node; where that
// or the workspace's probe fails, an explicit shm request logs why and uses mpi, as automatic does
// silently.
std::unique_ptr<SegmentReduce> make_segment_reduce(const dist::Communicator& group, const TransportOptions& options);

}  // namespace echo::comm
