// How one call of the pipelined all-reduce is cut into tiles and rounds (docs/design.md §7,
// "Pipelined peer-to-peer transport"). Owner segments are those of the two-phase all-reduce
// (segments.h), so results are the same bits; each segment is cut into tiles of whole codec
// groups, as many as fill one workspace slot, and a round moves up to `geometry.tiles` tiles of
// every segment. Shared by the shm transport and the cuda_ipc transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "comm/codec.h"
#include "comm/p2p/p2p_geometry.h"
#include "comm/segments.h"

namespace echo::comm::p2p {

struct Tile {
  size_t begin = 0;  // element offset in the tensor
  size_t size = 0;   // elements (0: this segment has no tile in this round)
};

struct PipelineSchedule {
  std::vector<Segment> segments;  // segment j is owned by rank j
  size_t tile_elems = 0;          // elements per tile (whole groups), the last tile of a segment shorter
  // The longest tile this call has: min(tile_elems, the largest segment). What a tile buffer
  // needs; with a large comm.p2p_slot_kib tile_elems alone can exceed the call many times over.
  size_t largest_tile = 0;
  int rounds = 0;                 // 0 when n == 0
  int tiles_per_round = 0;

  // Tile `slot` of segment `owner` in round `round`.
  Tile tile(int owner, int round, int slot) const;
  // Tiles of the whole call, over every segment (what the stages launch per tile; benchmarks
  // report it beside the times).
  size_t tile_count() const;
};

// `group_elems` is the codec's granularity and `group_bytes` the encoded size of one whole group.
// Throws when one group does not fit a slot (the caller falls back to the two-collective path).
PipelineSchedule make_pipeline_schedule(size_t n, const P2pGeometry& geometry, size_t group_elems,
                                        size_t group_bytes);
bool group_fits_slot(const P2pGeometry& geometry, size_t group_bytes);
// The same for a codec: its granularity is the group, and the group's wire bytes decide the fit.
PipelineSchedule make_pipeline_schedule(size_t n, const P2pGeometry& geometry, const SegmentCodec& codec);
bool group_fits_slot(const P2pGeometry& geometry, const SegmentCodec& codec);

// The schedules of the last calls, keyed by what determines them: the codec (its group's
// elements and bytes, which encode dtype, bits, policy and group size) and the tensor length
// (which fixes the segment sizes). Training calls a handful of shapes over and over.
class ScheduleCache {
 public:
  explicit ScheduleCache(const P2pGeometry& geometry) : geometry_(geometry) {}
  const PipelineSchedule& get(size_t n, size_t group_elems, size_t group_bytes);
  const PipelineSchedule& get(size_t n, const SegmentCodec& codec) {
    return get(n, codec.granularity(), codec.bytes(codec.granularity()));
  }
  size_t size() const { return cache_.size(); }

 private:
  static constexpr size_t kCapacity = 64;  // more distinct shapes than a model has sites
  P2pGeometry geometry_;
  std::map<std::tuple<size_t, size_t, size_t>, PipelineSchedule> cache_;
};

}  // namespace echo::comm::p2p
