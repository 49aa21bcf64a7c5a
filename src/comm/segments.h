// How a tensor of n elements is cut into P owner segments for the two-phase all-reduce
// (docs/design.md §7, QAR): boundaries on multiples of the group size, segment j owned by
// rank j, the last segments short or empty when n is small. Any n >= 0 and P >= 1 work.
#pragma once

#include <cstddef>
#include <vector>

namespace echo::comm {

struct Segment {
  size_t begin = 0;
  size_t size = 0;
};

std::vector<Segment> make_segments(size_t n, int num_ranks, size_t group_size);

}  // namespace echo::comm
