// The all-to-all / owner-sum / all-gather engine over MPI.
#include "comm/two_phase_reduce.h"


#include "comm/two_phase_layout.h"
#include "core/stopwatch.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::comm {


size_t TwoPhaseReduce::wire_bytes_per_rank(size_t n, int num_ranks, int rank, const SegmentCodec& codec) {
  const auto segs = make_segments(n, num_ranks, codec.granularity());
  size_t total = 0;
  for (int j = 0; j < num_ranks; ++j)
    if (j != rank) total += codec.bytes(segs[j].size);
  total += static_cast<size_t>(num_ranks - 1) * codec.bytes(segs[rank].size);
  return total;
}

float TwoPhaseReduce::group_max(float local, Site) {
  float global = 0.0f;
  const dist::CollectiveScope watched("the backward rescale's max over MPI", comm_);
  MPI_CHECK(MPI_Allreduce(&local, &global, 1, MPI_FLOAT, MPI_MAX, comm_.get()));
  return global;
}

size_t TwoPhaseReduce::run(std::span<float> x, const SegmentCodec& codec) {
  const int P = comm_.size();
  const int me = comm_.rank();
  const TwoPhaseLayout L = make_two_phase_layout(x.size(), P, me, codec.granularity(),
                                                 [&](size_t m) { return codec.bytes(m); });
  const auto& segs = L.segments;
  const Segment mine = segs[me];

  ++times_.calls;
  const dist::CollectiveScope watched("the two-phase all-reduce over MPI", comm_);
  // Phase 1: encode every non-owned segment for its owner.
  if (send_.size() < L.to_owners_send.buffer_bytes) send_.resize(L.to_owners_send.buffer_bytes);
  if (recv_.size() < L.to_owners_recv.buffer_bytes) recv_.resize(L.to_owners_recv.buffer_bytes);
  Stopwatch watch;
  for (int j = 0; j < P; ++j)
    if (j != me && segs[j].size > 0)
      codec.encode(x.data() + segs[j].begin, segs[j].size, send_.data() + L.to_owners_send.displs[j]);
  times_.encode_s += watch.lap();

  MPI_CHECK(MPI_Alltoallv(send_.data(), L.to_owners_send.counts.data(), L.to_owners_send.displs.data(), MPI_BYTE,
                          recv_.data(), L.to_owners_recv.counts.data(), L.to_owners_recv.displs.data(), MPI_BYTE,
                          comm_.get()));
  times_.copy_s += watch.lap();

  // Phase 2: the owner's fp32 sum, in rank order, its own segment entering unencoded.
  watch.lap();
  if (sum_.size() < mine.size) sum_.resize(mine.size);
  codec.load_own(x.data() + mine.begin, mine.size, sum_.data());
  for (int j = 0; j < P; ++j)
    if (j != me && mine.size > 0)
      codec.decode_add(recv_.data() + L.to_owners_recv.displs[j], mine.size, sum_.data());
  times_.reduce_s += watch.lap();
  if (own_code_.size() < L.own_code_bytes) own_code_.resize(L.own_code_bytes);
  if (mine.size > 0) codec.encode(sum_.data(), mine.size, own_code_.data());
  times_.encode_s += watch.lap();

  // Phase 3: all-gather of the encoded sums; every rank decodes the same bytes.
  watch.lap();
  if (gathered_.size() < L.gather.buffer_bytes) gathered_.resize(L.gather.buffer_bytes);
  MPI_CHECK(MPI_Allgatherv(own_code_.data(), L.gather.counts[me], MPI_BYTE, gathered_.data(), L.gather.counts.data(),
                           L.gather.displs.data(), MPI_BYTE, comm_.get()));
  times_.copy_s += watch.lap();

  size_t bad = 0;
  for (int j = 0; j < P; ++j)
    if (segs[j].size > 0)
      bad += codec.decode(gathered_.data() + L.gather.displs[j], segs[j].size, x.data() + segs[j].begin);
  times_.decode_s += watch.lap();
  return bad;
}

}  // namespace echo::comm
