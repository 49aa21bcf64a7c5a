// Tiles and rounds of one pipelined all-reduce call.
#include "comm/p2p/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace echo::comm::p2p {

bool group_fits_slot(const P2pGeometry& geometry, size_t group_bytes) {
  return group_bytes > 0 && group_bytes <= geometry.slot_bytes;
}

PipelineSchedule make_pipeline_schedule(size_t n, const P2pGeometry& geometry, size_t group_elems,
                                        size_t group_bytes) {
  ECHO_CHECK(group_elems > 0 && group_fits_slot(geometry, group_bytes),
             "one codec group ({} elements, {} bytes) does not fit a workspace slot of {} bytes", group_elems,
             group_bytes, geometry.slot_bytes);
  ECHO_CHECK(geometry.ranks >= 1 && geometry.tiles >= 1, "pipeline geometry needs ranks >= 1 and tiles >= 1");
  PipelineSchedule s;
  s.segments = make_segments(n, geometry.ranks, group_elems);
  s.tile_elems = group_elems * (geometry.slot_bytes / group_bytes);
  s.tiles_per_round = geometry.tiles;
  size_t max_tiles = 0;
  for (const Segment& seg : s.segments) {
    max_tiles = std::max(max_tiles, (seg.size + s.tile_elems - 1) / s.tile_elems);
    s.largest_tile = std::max(s.largest_tile, std::min(s.tile_elems, seg.size));
  }
  s.rounds = static_cast<int>((max_tiles + geometry.tiles - 1) / geometry.tiles);
  return s;
}

PipelineSchedule make_pipeline_schedule(size_t n, const P2pGeometry& geometry, const SegmentCodec& codec) {
  return make_pipeline_schedule(n, geometry, codec.granularity(), codec.bytes(codec.granularity()));
}

bool group_fits_slot(const P2pGeometry& geometry, const SegmentCodec& codec) {
  return group_fits_slot(geometry, codec.bytes(codec.granularity()));
}

size_t PipelineSchedule::tile_count() const {
  size_t count = 0;
  for (const Segment& seg : segments) count += (seg.size + tile_elems - 1) / tile_elems;
  return count;
}

Tile PipelineSchedule::tile(int owner, int round, int slot) const {
  const Segment& seg = segments[static_cast<size_t>(owner)];
  const size_t first = (static_cast<size_t>(round) * tiles_per_round + slot) * tile_elems;
  if (first >= seg.size) return {seg.begin + seg.size, 0};
  return {seg.begin + first, std::min(tile_elems, seg.size - first)};
}

const PipelineSchedule& ScheduleCache::get(size_t n, size_t group_elems, size_t group_bytes) {
  const auto key = std::make_tuple(n, group_elems, group_bytes);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kCapacity) cache_.clear();  // shapes beyond a model's handful: start over
  return cache_.emplace(key, make_pipeline_schedule(n, geometry_, group_elems, group_bytes)).first->second;
}

}  // namespace echo::comm::p2p
