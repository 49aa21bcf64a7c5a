// Owner segmentation on group boundaries.
#include "comm/segments.h"

#include <algorithm>

#include "core/error.h"

namespace echo::comm {

std::vector<Segment> make_segments(size_t n, int num_ranks, size_t group_size) {
  ECHO_CHECK(num_ranks >= 1, "segmentation needs at least one rank, got {}", num_ranks);
  ECHO_CHECK(group_size >= 1, "segmentation needs a positive group size");
  const size_t num_groups = (n + group_size - 1) / group_size;
  const size_t groups_per_rank = (num_groups + num_ranks - 1) / static_cast<size_t>(num_ranks);
  const size_t stride = groups_per_rank * group_size;
  std::vector<Segment> segments(static_cast<size_t>(num_ranks));
  for (size_t j = 0; j < segments.size(); ++j) {
    const size_t begin = std::min(n, j * stride);
    const size_t end = std::min(n, begin + stride);
    segments[j] = {begin, end - begin};
  }
  return segments;
}

}  // namespace echo::comm
