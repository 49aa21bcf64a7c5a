// world -> (dp, tp) mapping: tp_rank = rank % tp, dp_rank = rank / tp, and its errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "dist/world.h"

namespace echo::dist {

TEST(Layout, TpGroupsAreContiguousRanks) {
  for (int world : {1, 2, 4, 8, 12}) {
    for (int tp : {1, 2, 4}) {
      if (world % tp) continue;
      for (int r = 0; r < world; ++r) {
        const Layout l = make_layout(world, r, tp);
        EXPECT_EQ(l.dp, world / tp);
        EXPECT_EQ(l.tp_rank, r % tp);
        EXPECT_EQ(l.dp_rank, r / tp);
        EXPECT_EQ(l.dp_rank * tp + l.tp_rank, r);
      }
    }
  }
}

TEST(Layout, TpMustDivideTheWorld) {
  try {
    make_layout(6, 0, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'parallel.tp' = 4 does not divide the number of MPI ranks 6"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_layout(4, 0, 0), Error);
  EXPECT_THROW(make_layout(4, 4, 1), Error);
}

}  // namespace echo::dist
