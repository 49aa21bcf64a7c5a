// Echo: the quantized all-reduce with the two-timescale error-feedback compensator
// (Echo paper Algorithm 1), backward power-of-two rescaling (Sec. 5.4), a per-site bit
// policy and optional error telemetry. At each site, on each rank:
//   c  = η·(a·m1 + (1-a)·m2);  x' = x + c
//   backward only: e from max|x'| over the group; x' <- x'·2^e
//   ŷ  = QAR(x') (the group quantizer over the mpi or shm engine, segment_reduce.h); backward: ŷ <- ŷ·2^-e
//   u  = x' - ŷ/P in original units;  m_j <- β_j·m_j + (1-β_j)·u
// The compensator state is per direction and reset by begin_pass(). A direction whose
// quantization is disabled falls back to the exact 16-bit all-reduce.
// A contiguous f32 or bf16 CUDA tensor runs the same flow on the device (device_qar.h), with
// only the quantized bytes staged through the host; with telemetry on, or in a direction that
// is not quantized, it is host-staged through an f32 copy (AllReduce::all_reduce(Tensor&)).
#pragma once

#include <memory>
#include <vector>

#include "comm/all_reduce.h"
#include "comm/echo/bit_policy.h"
#include "comm/echo/compensator.h"
#include "comm/echo/device_qar.h"
#include "comm/echo/fused_echo_site.h"
#include "comm/echo/telemetry.h"
#include "comm/exact_all_reduce.h"
#include "comm/segment_reduce.h"
#include "core/quant_spec.h"

namespace echo::comm {

struct EchoOptions {
  QuantSpec quant;             // bits here is the base width of the bit policy
  bool early_site_8bit = false;
  int num_layers = 0;          // for early_site_8bit and site-range checks; 0 = unchecked
  bool compensate = true;
  CompensatorCoeffs coeffs;
  bool forward = true;         // quantize forward sites (else exact 16-bit)
  bool backward = true;        // quantize backward sites (else exact 16-bit)
  bool backward_rescale = true;
  bool telemetry = false;
  TransportOptions transport;  // how the quantized bytes travel (segment_reduce.h)
  // Compensator and rescale inside the pipeline, tile by tile, where the transport can
  // (fused_echo_site.h; shm). Same bits either way; false is the unfused reference.
  bool fuse = true;
};

class EchoAllReduce final : public AllReduce {
 public:
  EchoAllReduce(const dist::Communicator& comm, const EchoOptions& options);

  void begin_pass(Direction direction) override;
  void all_reduce(Tensor& x, Site site) override;
  void all_reduce(std::span<float> x, Site site) override;
  // two_collective: Echo's arithmetic over the unpipelined engine only (comm.allreduce).
  std::string name() const override { return options_.transport.pipelined ? "echo" : "two_collective"; }
  size_t wire_bytes_per_rank(size_t n, Site site) const override;
  SegmentReduce* engine() const override { return engine_.get(); }
  void raise_deferred_faults() override {
    if (device_) device_->raise_deferred_faults();
  }

  int bits_for(Site site) const;
  // Telemetry costs one exact fp32 all-reduce per site: the trainer turns it on for the
  // steps it logs (comm.telemetry_interval).
  void set_telemetry(bool on) { options_.telemetry = on; }
  // The host compensator; a pass whose sites ran on the device keeps its state there instead.
  const Compensator& compensator(Direction d) const { return state(d).compensator; }
  // The device path once a device tensor has been reduced (else null); tests read its state.
  const DeviceEcho* device_path() const { return device_.get(); }
  // Telemetry of the current (or last) pass in each direction; empty unless enabled.
  const std::vector<SiteTelemetry>& telemetry(Direction d) const { return state(d).telemetry.records(); }

 private:
  // Where a pass's compensator state lives: set by the pass's first quantized site. Host and
  // device sites cannot mix within a pass, as each side keeps its own m1, m2.
  enum class Path : uint8_t { unset, host, device };
  struct PassState {
    Compensator compensator;
    TelemetryPass telemetry;
    Path path = Path::unset;
  };
  PassState& state(Direction d) { return d == Direction::forward ? forward_ : backward_; }
  const PassState& state(Direction d) const { return d == Direction::forward ? forward_ : backward_; }
  bool quantized(Direction d) const { return d == Direction::forward ? options_.forward : options_.backward; }
  void use_path(Site site, Path path);
  int group_rescale_exponent(float local_absmax, Site site);
  void fused_all_reduce(std::span<float> x, Site site, const QuantSpec& spec);
  void gather_telemetry(std::span<const float> x, std::span<const float> y, Site site, int bits, int exponent);

  EchoOptions options_;
  BitPolicy policy_;
  std::shared_ptr<SegmentReduce> engine_;
  ExactAllReduce exact_;  // the unquantized directions, on engine_ (one workspace per group)
  PassState forward_, backward_;
  std::unique_ptr<DeviceEcho> device_;  // made at the first device tensor

  std::vector<float> x_comp_;   // x' = x + c for the current site
  std::vector<float> x_saved_;  // the uncompensated x (telemetry only)
  std::vector<float> tele_;     // [u | x] summed over the group (telemetry only)
};

}  // namespace echo::comm
