// The pipelined transports' schedule (docs/design.md §7): over every round and tile slot, the
// tiles of each owner's segment cover it exactly once, in order, in whole codec groups of at most
// tile_elems values; rounds is the fewest that hold the longest segment; largest_tile is the
// longest tile actually used (what a tile buffer needs), which a large slot must not inflate.
#include "comm/p2p/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace echo::comm::p2p {
namespace {

TEST(PipelineSchedule, TilesCoverEverySegmentOnceInWholeGroups) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    P2pGeometry g;
    g.ranks = 1 + static_cast<int>(rng() % 8);
    g.tiles = 1 + static_cast<int>(rng() % 20);
    g.slot_bytes = 64 + rng() % 8192;
    const size_t group = size_t{1} << (rng() % 8);        // 1 .. 128 values
    const size_t group_bytes = 1 + rng() % 64;             // any encoded size that fits
    const size_t n = rng() % 4 == 0 ? rng() % 50 : rng() % 200'000;
    SCOPED_TRACE(testing::Message() << "P " << g.ranks << " tiles " << g.tiles << " slot " << g.slot_bytes << " group "
                                    << group << "/" << group_bytes << "B n " << n);
    const PipelineSchedule s = make_pipeline_schedule(n, g, group, group_bytes);
    ASSERT_EQ(s.tile_elems, group * (g.slot_bytes / group_bytes));
    size_t longest_segment = 0, longest_tile = 0, tiles = 0;
    int rounds_needed = 0;
    for (int owner = 0; owner < g.ranks; ++owner) {
      const Segment seg = s.segments[static_cast<size_t>(owner)];
      longest_segment = std::max(longest_segment, seg.size);
      size_t next = seg.begin;
      for (int round = 0; round < s.rounds; ++round)
        for (int slot = 0; slot < g.tiles; ++slot) {
          const Tile t = s.tile(owner, round, slot);
          if (t.size == 0) continue;
          rounds_needed = std::max(rounds_needed, round + 1);
          ASSERT_EQ(t.begin, next) << "owner " << owner << " round " << round << " slot " << slot;
          ASSERT_LE(t.size, s.tile_elems);
          const bool last = t.begin + t.size == seg.begin + seg.size;
          if (!last) {
            ASSERT_EQ(t.size % group, 0u) << "only a segment's last tile may end inside a group";
          }
          longest_tile = std::max(longest_tile, t.size);
          next += t.size;
          ++tiles;
        }
      ASSERT_EQ(next, seg.begin + seg.size) << "owner " << owner << ": the rounds miss part of the segment";
    }
    EXPECT_EQ(s.rounds, rounds_needed);
    EXPECT_EQ(s.largest_tile, longest_tile);
    EXPECT_EQ(s.largest_tile, std::min(s.tile_elems, longest_segment));
    EXPECT_EQ(s.tile_count(), tiles);
  }
}

// The codec overloads take the group and its wire bytes from the codec: 4-bit codes of 128 values
// are 64 bytes plus a 4-byte fp16 scale and zero point, bf16 groups are 32 values of 2 bytes.
TEST(PipelineSchedule, ACodecGivesItsGroupAndWireBytes) {
  P2pGeometry g;
  g.ranks = 3;
  g.tiles = 2;
  g.slot_bytes = 1000;
  const QuantCodec quant({QuantPolicy::asym_zero_aware, 4, 128});
  const PipelineSchedule q = make_pipeline_schedule(100'000, g, quant);
  EXPECT_EQ(q.tile_elems, 128u * (1000 / 68));  // 14 groups a slot
  const PipelineSchedule b = make_pipeline_schedule(100'000, g, Bf16Codec());
  EXPECT_EQ(b.tile_elems, 32u * (1000 / 64));  // 15 groups a slot
  // 100,000 values over 3 ranks in whole groups of 128: 33,408 + 33,408 + 33,184 values.
  EXPECT_EQ(q.tile_count(), 19u + 19u + 19u);  // 1792 values a tile
  g.slot_bytes = 67;
  EXPECT_FALSE(group_fits_slot(g, quant));
  EXPECT_TRUE(group_fits_slot(g, Bf16Codec()));  // 64 bytes
}

TEST(PipelineSchedule, ALargeSlotDoesNotInflateTheTileBuffer) {
  P2pGeometry g;
  g.ranks = 2;
  g.slot_bytes = size_t{64} << 20;  // comm.p2p_slot_kib = 65536
  const PipelineSchedule s = make_pipeline_schedule(1000, g, 128, 68);  // 4-bit, g = 128
  EXPECT_EQ(s.tile_elems, size_t{128} * ((size_t{64} << 20) / 68));  // ~126 M values a tile
  EXPECT_EQ(s.largest_tile, 512u);  // 1000 values in groups of 128 over 2 ranks: 512 + 488
  EXPECT_EQ(s.rounds, 1);
}

TEST(PipelineSchedule, AGroupLargerThanASlotIsRefused) {
  P2pGeometry g;
  g.slot_bytes = 1024;
  EXPECT_FALSE(group_fits_slot(g, 1025));
  EXPECT_TRUE(group_fits_slot(g, 1024));
  EXPECT_THROW(make_pipeline_schedule(5000, g, 4096, 2052), Error);
}

}  // namespace
}  // namespace echo::comm::p2p
