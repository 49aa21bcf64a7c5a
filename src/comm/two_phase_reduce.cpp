// The all-to-all / owner-sum / all-gather engine over MPI.
#include "comm/two_phase_reduce.h"

#include <limits>

#include "core/error.h"
#include "dist/mpi_check.h"

namespace echo::comm {

namespace {

// Blocks inside a buffer start on 8-byte boundaries so decoders may read fp16/fp32 words
// directly; the padding is local and never counted as wire bytes.
constexpr size_t kBlockAlign = 8;
size_t aligned(size_t bytes) { return (bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }

int to_int(size_t v, const char* what) {
  ECHO_CHECK(v <= static_cast<size_t>(std::numeric_limits<int>::max()),
             "{} of {} bytes exceeds what one MPI call can move (2 GiB); split the tensor", what, v);
  return static_cast<int>(v);
}

}  // namespace

size_t TwoPhaseReduce::wire_bytes_per_rank(size_t n, int num_ranks, int rank, const SegmentCodec& codec) {
  const auto segs = make_segments(n, num_ranks, codec.granularity());
  size_t total = 0;
  for (int j = 0; j < num_ranks; ++j)
    if (j != rank) total += codec.bytes(segs[j].size);
  total += static_cast<size_t>(num_ranks - 1) * codec.bytes(segs[rank].size);
  return total;
}

size_t TwoPhaseReduce::run(std::span<float> x, const SegmentCodec& codec) {
  const int P = comm_.size();
  const int me = comm_.rank();
  const auto segs = make_segments(x.size(), P, codec.granularity());
  const Segment mine = segs[me];
  const size_t mine_bytes = aligned(codec.bytes(mine.size));

  send_counts_.assign(P, 0);
  send_displs_.assign(P, 0);
  recv_counts_.assign(P, 0);
  recv_displs_.assign(P, 0);

  // Phase 1: encode every non-owned segment for its owner.
  size_t send_total = 0;
  for (int j = 0; j < P; ++j) {
    send_displs_[j] = to_int(send_total, "all-to-all buffer");
    if (j == me) continue;
    send_counts_[j] = to_int(codec.bytes(segs[j].size), "segment");
    send_total += aligned(codec.bytes(segs[j].size));
  }
  for (int j = 0; j < P; ++j) {
    recv_displs_[j] = to_int(static_cast<size_t>(j) * mine_bytes, "all-to-all buffer");
    recv_counts_[j] = j == me ? 0 : to_int(codec.bytes(mine.size), "segment");
  }
  if (send_.size() < send_total) send_.resize(send_total);
  if (recv_.size() < mine_bytes * P) recv_.resize(mine_bytes * P);
  for (int j = 0; j < P; ++j)
    if (j != me && segs[j].size > 0) codec.encode(x.data() + segs[j].begin, segs[j].size, send_.data() + send_displs_[j]);

  MPI_CHECK(MPI_Alltoallv(send_.data(), send_counts_.data(), send_displs_.data(), MPI_BYTE, recv_.data(),
                          recv_counts_.data(), recv_displs_.data(), MPI_BYTE, comm_.get()));

  // Phase 2: the owner's fp32 sum, in rank order, its own segment entering unencoded.
  if (sum_.size() < mine.size) sum_.resize(mine.size);
  codec.load_own(x.data() + mine.begin, mine.size, sum_.data());
  for (int j = 0; j < P; ++j)
    if (j != me && mine.size > 0) codec.decode_add(recv_.data() + recv_displs_[j], mine.size, sum_.data());
  if (own_code_.size() < mine_bytes) own_code_.resize(mine_bytes);
  if (mine.size > 0) codec.encode(sum_.data(), mine.size, own_code_.data());

  // Phase 3: all-gather of the encoded sums; every rank decodes the same bytes.
  size_t gathered_total = 0;
  for (int j = 0; j < P; ++j) {
    recv_displs_[j] = to_int(gathered_total, "all-gather buffer");
    recv_counts_[j] = to_int(codec.bytes(segs[j].size), "segment");
    gathered_total += aligned(codec.bytes(segs[j].size));
  }
  if (gathered_.size() < gathered_total) gathered_.resize(gathered_total);
  MPI_CHECK(MPI_Allgatherv(own_code_.data(), recv_counts_[me], MPI_BYTE, gathered_.data(), recv_counts_.data(),
                           recv_displs_.data(), MPI_BYTE, comm_.get()));

  size_t bad = 0;
  for (int j = 0; j < P; ++j)
    if (segs[j].size > 0) bad += codec.decode(gathered_.data() + recv_displs_[j], segs[j].size, x.data() + segs[j].begin);
  return bad;
}

}  // namespace echo::comm
