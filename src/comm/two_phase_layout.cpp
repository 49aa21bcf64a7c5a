#include "comm/two_phase_layout.h"

#include <limits>

#include "core/error.h"

namespace echo::comm {

namespace {

constexpr size_t kBlockAlign = 8;
size_t aligned(size_t bytes) { return (bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }

int to_int(size_t v, const char* what) {
  ECHO_CHECK(v <= static_cast<size_t>(std::numeric_limits<int>::max()),
             "{} of {} bytes exceeds what one MPI call can move (2 GiB); split the tensor", what, v);
  return static_cast<int>(v);
}

}  // namespace

TwoPhaseLayout make_two_phase_layout(size_t n, int num_ranks, int rank, size_t granularity,
                                     const std::function<size_t(size_t)>& encoded_bytes) {
  TwoPhaseLayout L;
  L.segments = make_segments(n, num_ranks, granularity);
  const size_t P = static_cast<size_t>(num_ranks);
  const size_t mine = encoded_bytes(L.segments[rank].size);
  L.own_code_bytes = aligned(mine);
  for (ByteExchange* e : {&L.to_owners_send, &L.to_owners_recv, &L.gather}) {
    e->counts.assign(P, 0);
    e->displs.assign(P, 0);
  }
  size_t send_total = 0, gathered_total = 0;
  for (int j = 0; j < num_ranks; ++j) {
    const size_t bytes = encoded_bytes(L.segments[j].size);
    L.to_owners_send.displs[j] = to_int(send_total, "all-to-all buffer");
    if (j != rank) {
      L.to_owners_send.counts[j] = to_int(bytes, "segment");
      send_total += aligned(bytes);
    }
    L.to_owners_recv.displs[j] = to_int(static_cast<size_t>(j) * L.own_code_bytes, "all-to-all buffer");
    L.to_owners_recv.counts[j] = j == rank ? 0 : to_int(mine, "segment");
    L.gather.displs[j] = to_int(gathered_total, "all-gather buffer");
    L.gather.counts[j] = to_int(bytes, "segment");
    gathered_total += aligned(bytes);
  }
  L.to_owners_send.buffer_bytes = send_total;
  L.to_owners_recv.buffer_bytes = L.own_code_bytes * P;
  L.gather.buffer_bytes = gathered_total;
  return L;
}

}  // namespace echo::comm
