// Exact 16-bit and fp32 all-reduce over the mpi or shm engine.
#include "comm/exact_all_reduce.h"

#include <cmath>
#include <utility>

#include "comm/two_phase_reduce.h"
#include "core/error.h"

namespace echo::comm {

void check_output(size_t bad, Site site, const char* what) {
  ECHO_RUN_CHECK(bad == 0,
             "non-finite values in the {} all-reduce at {}: {} bad output {} (a rank's contribution holds NaN/Inf, "
             "or a group scale overflowed fp16)",
             what, to_string(site), bad, bad == 1 ? "entry" : "entries");
}

void check_rescale_max(float group_max, Site site) {
  ECHO_RUN_CHECK(std::isfinite(group_max),
             "non-finite gradient entering the backward all-reduce at {} (NaN or Inf on some rank)", to_string(site));
}

ExactAllReduce::ExactAllReduce(const dist::Communicator& comm, ExactPrecision precision,
                               const TransportOptions& transport)
    : ExactAllReduce(std::shared_ptr<SegmentReduce>(make_segment_reduce(comm, transport)), precision) {}

ExactAllReduce::ExactAllReduce(std::shared_ptr<SegmentReduce> engine, ExactPrecision precision)
    : engine_(std::move(engine)), precision_(precision) {
  ECHO_CHECK(engine_ != nullptr, "the exact all-reduce needs an engine");
  if (precision_ == ExactPrecision::bf16)
    codec_ = std::make_unique<Bf16Codec>();
  else
    codec_ = std::make_unique<Fp32Codec>();
}

void ExactAllReduce::all_reduce(std::span<float> x, Site site) {
  check_output(engine_->run(x, *codec_, site), site, precision_ == ExactPrecision::bf16 ? "exact bf16" : "exact fp32");
}

std::string ExactAllReduce::name() const { return precision_ == ExactPrecision::bf16 ? "exact" : "exact_fp32"; }

size_t ExactAllReduce::wire_bytes_per_rank(size_t n, Site) const {
  return TwoPhaseReduce::wire_bytes_per_rank(n, engine_->comm().size(), engine_->comm().rank(), *codec_);
}

}  // namespace echo::comm
