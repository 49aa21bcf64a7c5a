// The byte layout of the two exchanges of the two-phase all-reduce (two_phase_reduce.h;
// docs/design.md §7, QAR), shared by the host engine (TwoPhaseReduce) and the device one
// (echo/device_qar.cpp) so that both move the same bytes: the all-to-all that sends every
// non-owned segment to its owner, and the all-gather of the owners' encoded sums. Blocks start
// on 8-byte boundaries inside a buffer so decoders may read fp16/fp32 words directly; the
// padding is local and never counted in `counts`.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "comm/segments.h"

namespace echo::comm {

// Counts and displacements of one MPI v-collective, in bytes, plus the buffer size they need.
struct ByteExchange {
  std::vector<int> counts, displs;
  size_t buffer_bytes = 0;
};

struct TwoPhaseLayout {
  std::vector<Segment> segments;  // segment j is owned by rank j
  ByteExchange to_owners_send;    // phase 1, this rank's side: every non-owned segment
  ByteExchange to_owners_recv;    // phase 1, the owner's side: P-1 copies of its own segment
  ByteExchange gather;            // phase 3: every owner's encoded sum, at every rank
  size_t own_code_bytes = 0;      // buffer for this rank's encoded sum
};

// `encoded_bytes(m)` is the wire size of m encoded values; segment boundaries fall on multiples
// of `granularity`. Throws when a count exceeds what one MPI call can move (2 GiB).
TwoPhaseLayout make_two_phase_layout(size_t n, int num_ranks, int rank, size_t granularity,
                                     const std::function<size_t(size_t)>& encoded_bytes);

}  // namespace echo::comm
