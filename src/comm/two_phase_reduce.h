// The two-phase all-reduce every implementation shares (docs/design.md §7, QAR; Echo paper
// Sec. 4.1): segment j of the tensor is owned by rank j. Each rank encodes the P-1 segments
// it does not own and sends each to its owner (all-to-all); the owner adds the P-1 decoded
// copies, in rank order, to its own segment in fp32; it encodes the sum once; an all-gather
// brings every owner's encoded sum to all ranks, the owner included, which all decode the
// same bytes. So each element is encoded at most twice for any P, and every rank's output
// is bitwise identical. With the bf16 codec this is the 16-bit baseline; with the quantizer
// codec it is Echo's QAR.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/codec.h"
#include "comm/segment_reduce.h"
#include "comm/segments.h"
#include "dist/communicator.h"

namespace echo::comm {

class TwoPhaseReduce final : public SegmentReduce {
 public:
  explicit TwoPhaseReduce(const dist::Communicator& comm) : comm_(comm) {}

  size_t run(std::span<float> x, const SegmentCodec& codec, Site) override { return run(x, codec); }
  const char* transport() const override { return "mpi"; }
  float group_max(float local, Site site) override;

  // x <- sum over ranks, in place. Returns the number of bad output entries (poisoned
  // groups or non-finite values), the same number on every rank.
  size_t run(std::span<float> x, const SegmentCodec& codec);

  // Bytes a rank sends in one call: its encoded non-owned segments plus its encoded sum to
  // each of the P-1 peers.
  static size_t wire_bytes_per_rank(size_t n, int num_ranks, int rank, const SegmentCodec& codec);

  const dist::Communicator& comm() const override { return comm_; }

 private:
  const dist::Communicator& comm_;
  // Workspaces grow to the largest call and are reused: no allocation in steady state.
  std::vector<uint8_t> send_, recv_, own_code_, gathered_;
  std::vector<float> sum_;
};

}  // namespace echo::comm
