// Owner segmentation: covers [0, n) exactly, in order, on group boundaries, for any n and P.
#include "comm/segments.h"

#include <gtest/gtest.h>

namespace echo::comm {

TEST(Segments, CoverTheTensorInOrderOnGroupBoundaries) {
  for (size_t n : {0ul, 1ul, 7ul, 128ul, 129ul, 1000ul, 4096ul, 100003ul}) {
    for (int p : {1, 2, 3, 4, 7}) {
      for (size_t g : {1ul, 16ul, 128ul}) {
        const auto segs = make_segments(n, p, g);
        ASSERT_EQ(segs.size(), static_cast<size_t>(p));
        size_t next = 0;
        for (int j = 0; j < p; ++j) {
          EXPECT_EQ(segs[j].begin, next) << "n=" << n << " p=" << p << " g=" << g << " j=" << j;
          if (segs[j].begin + segs[j].size < n) {
            EXPECT_EQ(segs[j].size % g, 0u) << "only the last segment is short";
          }
          next = segs[j].begin + segs[j].size;
        }
        EXPECT_EQ(next, n);
      }
    }
  }
}

TEST(Segments, ShortLastSegmentAndEmptyTail) {
  // 600 values = 5 groups of 128 (the last one short) over 4 ranks: 2 groups per rank, so
  // ranks 0 and 1 own 256 values, rank 2 the short rest, rank 3 nothing.
  const auto segs = make_segments(600, 4, 128);
  EXPECT_EQ(segs[0].size, 256u);
  EXPECT_EQ(segs[1].size, 256u);
  EXPECT_EQ(segs[2].size, 88u);
  EXPECT_EQ(segs[3].size, 0u);
}

}  // namespace echo::comm
