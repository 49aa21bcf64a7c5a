// Two-phase byte layout: what rank r sends to owner j is exactly what j expects from r, every
// block starts 8-byte aligned and fits its buffer without overlap, for odd sizes and rank counts.
#include "comm/two_phase_layout.h"

#include <gtest/gtest.h>

namespace echo::comm {
namespace {

// An odd wire size (header + 4-bit payload rounded up) so blocks are rarely 8-byte multiples.
size_t odd_bytes(size_t m) { return m == 0 ? 0 : 6 + (m + 1) / 2; }

void expect_blocks_fit(const ByteExchange& e, const char* what) {
  size_t end = 0;
  for (size_t j = 0; j < e.counts.size(); ++j) {
    if (e.counts[j] == 0) continue;
    EXPECT_EQ(e.displs[j] % 8, 0) << what << " block " << j;
    EXPECT_GE(static_cast<size_t>(e.displs[j]), end) << what << " block " << j << " overlaps";
    end = static_cast<size_t>(e.displs[j]) + static_cast<size_t>(e.counts[j]);
  }
  EXPECT_LE(end, e.buffer_bytes) << what;
}

TEST(TwoPhaseLayout, SendsMatchReceivesAndBlocksAreAlignedAndDisjoint) {
  for (size_t n : {1ul, 127ul, 600ul, 4097ul, 100003ul}) {
    for (int p : {1, 2, 3, 4, 7}) {
      std::vector<TwoPhaseLayout> L;
      for (int r = 0; r < p; ++r) L.push_back(make_two_phase_layout(n, p, r, 128, odd_bytes));
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("n=" + std::to_string(n) + " p=" + std::to_string(p) + " r=" + std::to_string(r));
        expect_blocks_fit(L[r].to_owners_send, "send");
        expect_blocks_fit(L[r].to_owners_recv, "recv");
        expect_blocks_fit(L[r].gather, "gather");
        EXPECT_GE(L[r].own_code_bytes, odd_bytes(L[r].segments[r].size));
        for (int j = 0; j < p; ++j) {
          EXPECT_EQ(L[r].to_owners_send.counts[j], L[j].to_owners_recv.counts[r]);
          const int expected = j == r ? 0 : static_cast<int>(odd_bytes(L[r].segments[j].size));
          EXPECT_EQ(L[r].to_owners_send.counts[j], expected);
          EXPECT_EQ(L[r].gather.counts[j], static_cast<int>(odd_bytes(L[j].segments[j].size)));
          EXPECT_EQ(L[r].gather.displs[j], L[0].gather.displs[j]) << "all ranks gather alike";
        }
      }
    }
  }
}

TEST(TwoPhaseLayout, RefusesCountsBeyondOneMpiCall) {
  const auto huge = [](size_t m) { return m * 4096; };  // 2^20 values per segment → 4 GiB
  EXPECT_THROW(make_two_phase_layout(size_t{1} << 21, 2, 0, 128, huge), std::exception);
}

}  // namespace
}  // namespace echo::comm
