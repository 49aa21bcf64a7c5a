// The exact baselines: `bf16` is the 16-bit all-reduce Echo is measured against (values
// rounded to bf16, summed in fp32, the sum rounded to bf16, identical on every rank) and
// `fp32` sums without rounding. Both move their values through the same engine as
// Echo (segment_reduce.h), so a benchmark compares codecs, not algorithms.
#pragma once

#include <memory>

#include "comm/all_reduce.h"
#include "comm/segment_reduce.h"

namespace echo::comm {

enum class ExactPrecision { bf16, fp32 };

class ExactAllReduce final : public AllReduce {
 public:
  ExactAllReduce(const dist::Communicator& comm, ExactPrecision precision, const TransportOptions& transport = {});
  // On an engine another all-reduce of the group also runs (Echo's unquantized directions use
  // Echo's: one shm workspace and one set of lane threads per group, not two). The engine takes
  // one call at a time, so the two must not call it concurrently; a trainer's sites are serial.
  ExactAllReduce(std::shared_ptr<SegmentReduce> engine, ExactPrecision precision);

  using AllReduce::all_reduce;
  void all_reduce(std::span<float> x, Site site) override;
  std::string name() const override;
  size_t wire_bytes_per_rank(size_t n, Site site) const override;
  SegmentReduce* engine() const override { return engine_.get(); }

 private:
  std::shared_ptr<SegmentReduce> engine_;
  ExactPrecision precision_;
  std::unique_ptr<SegmentCodec> codec_;
};

// Throws an echo::Error naming the site when an all-reduce produced bad values. Every rank
// sees the same count, so every rank throws together and none is left in a collective.
void check_output(size_t bad, Site site, const char* what);
// Throws the non-finite-gradient error naming the site unless the group's max |x'| of a backward
// rescale (docs/design.md §9) is finite: one text for the host, shm and device paths.
void check_rescale_max(float group_max, Site site);

}  // namespace echo::comm
