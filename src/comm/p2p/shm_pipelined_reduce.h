// The pipelined peer-to-peer all-reduce on CPU ranks of one node (docs/design.md §7,
// "Pipelined peer-to-peer transport"; Echo paper Sec. 4.2 and Appendix C), over a ShmWorkspace.
// Per round of tiles, on every rank:
//   push    encode each tile of every segment this rank does not own straight into the owner's
//           recv slot; publish the owner's push flag (tile, me) = base + 1
//   reduce  per tile of its own segment: the own values (codec.load_own), then each peer's copy
//           in rank order as its push flag arrives, summed in fp32; encode the sum once
//   gather  copy the encoded sum into every peer's gather slot; publish gather flag (tile, me)
//   tail    decode every owner's sum as its gather flag arrives, into x
// run_fused() lets an Echo site work on each tile where it is read and written (TileHooks): x'
// is formed as a tile is pushed or loaded by its owner, and the sum finished (unscaled, the
// compensator updated) as it is decoded, with no pass over the whole tensor.
// Ranks run ahead of one another: a rank reduces tile 0 while a slower peer still pushes tile 5.
// With `threads` > 1 a rank splits the tile slots among its threads (slot t to thread t mod
// threads); each runs every stage and round for its slots on its own, as every flag and slot
// belongs to one (slot, peer) pair, so the threads never wait for one another. Threads 1.. are
// a LanePool's workers, started with the object and parked between calls; thread 0 is the caller.
// Element for element this is TwoPhaseReduce's arithmetic in its order, so both give the same
// bits. A round reuses the slots of the previous one only after this rank's tail has seen every
// owner's gather, which each owner publishes after it has read its recv slots.
#pragma once

#include <memory>
#include <vector>

#include "comm/p2p/peer_flags.h"
#include "comm/p2p/pipeline_schedule.h"
#include "comm/p2p/shm_workspace.h"
#include "comm/segment_reduce.h"
#include "comm/two_phase_reduce.h"
#include "core/lane_pool.h"

namespace echo::comm::p2p {

class ShmPipelinedReduce final : public SegmentReduce {
 public:
  ShmPipelinedReduce(const dist::Communicator& comm, std::shared_ptr<ShmWorkspace> workspace, double peer_timeout_s,
                     int threads = 1);

  size_t run(std::span<float> x, const SegmentCodec& codec, Site site) override;
  const dist::Communicator& comm() const override { return comm_; }
  const char* transport() const override { return "shm"; }
  float group_max(float local, Site site) override;
  bool fuses_tiles() const override { return true; }
  size_t run_fused(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks& hooks) override;

  size_t cached_schedules() const { return schedules_.size(); }

 private:
  // One thread's share of a call: the tile slots lane, lane + lanes, ...
  struct Lane {
    int index = 0;
    std::vector<float> sum;     // the owner's fp32 sum of one tile
    std::vector<float> staged;  // fused: one tile of x' (loaded) or of the decoded sum
    EngineTimes times;
  };
  // What one call's rounds share.
  struct Call {
    std::span<float> x;
    const SegmentCodec& codec;
    const PipelineSchedule& schedule;
    uint64_t first_base;
    CallHeader header;
    WaitContext ctx;
    TileHooks* hooks;
  };
  // Whether a call goes through the pipeline (else through the MPI engine, with the same bits).
  bool pipelines(std::span<const float> x, const SegmentCodec& codec) const;
  size_t run_pipeline(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks* hooks);
  size_t run_lane(const Call& call, Lane& lane);
  void add_lane_times();
  size_t run_round(const Call& call, int round, Lane& lane);
  // The values to encode for a tile: x itself, or what the hooks load into lane.staged.
  const float* tile_values(const Call& call, const Tile& tile, Lane& lane);

  const dist::Communicator& comm_;
  std::shared_ptr<ShmWorkspace> ws_;
  double peer_timeout_s_;
  std::vector<int> world_ranks_;  // of the group's ranks: what a timeout message names
  ScheduleCache schedules_;
  TwoPhaseReduce fallback_;  // for a codec whose one group does not fit a slot
  std::vector<Lane> lanes_;  // one per thread; lane 0 runs on the caller's
  LanePool pool_;            // runs lanes_[i] on its lane i; declared last, so destroyed (joined) first
};

}  // namespace echo::comm::p2p
