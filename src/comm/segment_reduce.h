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
#include "comm/p2p/p2p_geometry.h"
#include "dist/communicator.h"

namespace echo::comm {

// Where a rank's time in the engine went since the last reset (echo_bench prints the split).
// The shm engine tells its flag polling (wait) apart from its copies into peers. The MPI engine
// counts its two collectives as copy, the waiting for late peers inside them included: it cannot
// tell the two apart without adding a synchronization the engine does not have (a barrier before
// each collective would time a different engine, at P ranks on fewer cores a scheduler slice per
// barrier, and the ranks still leave a barrier at different times). So the like-for-like figure
// across transports is exchange() = copy + wait: the time between the codec passes spent moving
// bytes or waiting for peers. (On shm the push encodes straight into the owner's slot and the
// tail decodes straight from the gather slot, so those stores and loads count as codec time
// there, as the pipeline fuses them.)
struct EngineTimes {
  double encode_s = 0;  // quantizing the pushed segments and the owner's sum
  double reduce_s = 0;  // the owner's own values plus the decoded copies, in fp32
  double copy_s = 0;    // moving bytes to peers (mpi: the two collectives, waiting included)
  double decode_s = 0;  // decoding the gathered sums into x
  double wait_s = 0;    // waiting for peers (shm; 0 over mpi, where copy holds it)
  int calls = 0;

  double exchange_s() const { return copy_s + wait_s; }
};

// What an Echo site does to each value around the exchange (docs/design.md §8, fused
// compensator): an engine that can fuse calls load() where it reads a tile of x to encode it (the
// compensated, rescaled x' is never written to memory) and finish() where it has decoded the
// tile's sum (unscale, compensator update, output), both on tile-sized buffers.
class TileHooks {
 public:
  virtual ~TileHooks() = default;
  // out[0, n) = the values to send for x[begin, begin + n).
  virtual void load(const float* x, size_t begin, size_t n, float* out) const = 0;
  // y[0, n) is the decoded sum of x[begin, begin + n), which still holds this rank's input; writes
  // the site's output there.
  virtual void finish(float* x, size_t begin, size_t n, const float* y) = 0;
};

class SegmentReduce {
 public:
  virtual ~SegmentReduce() = default;
  // x <- sum over ranks, in place. Returns the number of bad output entries (poisoned groups or
  // non-finite values), the same number on every rank. `site` names the call in errors.
  virtual size_t run(std::span<float> x, const SegmentCodec& codec, Site site) = 0;
  virtual const dist::Communicator& comm() const = 0;
  virtual const char* transport() const = 0;

  // The largest `local` over the group (the backward rescale's one scalar), the same on every rank.
  virtual float group_max(float local, Site site) = 0;
  // run() with the site's per-tile work fused into the pipeline, where the engine can (else
  // false: the caller runs the unfused steps around run()).
  virtual bool fuses_tiles() const { return false; }
  virtual size_t run_fused(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks& hooks);

  const EngineTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

 protected:
  EngineTimes times_;
};

// cuda_ipc moves device tensors (device_qar.h); for host tensors it is `automatic`.
enum class TransportKind { mpi, shm, cuda_ipc, automatic };

struct TransportOptions {
  TransportKind kind = TransportKind::mpi;
  double peer_timeout_s = 300;  // shm, cuda_ipc: how long a wait for a peer lasts before it is an error
  p2p::P2pGeometry geometry;    // shm, cuda_ipc: tiles per round and slot size (ranks is the group's)
  int threads = 1;              // shm: threads per rank, each serving every threads-th tile slot
  // false: the two-collective engines only, whatever the kind (comm.allreduce: two_collective, the
  // unpipelined baseline): TwoPhaseReduce over MPI on the host; on the device NCCL between
  // distinct GPUs unless the kind is mpi, else host-staged MPI; never shm or cuda_ipc.
  bool pipelined = true;
};

// The engine for `group`. shm (and automatic) need every rank of the group on one node; where that
// or the workspace's probe fails, the log says why and the engine is mpi.
std::unique_ptr<SegmentReduce> make_segment_reduce(const dist::Communicator& group, const TransportOptions& options);

}  // namespace echo::comm
