// Echo's per-site flow: compensate, rescale, QAR, unscale, update, telemetry.
#include "comm/echo/echo_all_reduce.h"

#include <algorithm>
#include <cmath>

#include "comm/echo/quantize.h"
#include "comm/echo/rescale.h"
#include "comm/exact_all_reduce.h"
#include "comm/two_phase_reduce.h"
#include "core/error.h"

namespace echo::comm {

#ifndef ECHO_CUDA
// Without the CUDA backend there are no device tensors; device_qar.cpp is not built.
std::unique_ptr<DeviceEcho> make_device_echo(const dist::Communicator&, const TransportOptions&) { return nullptr; }
#endif

EchoAllReduce::EchoAllReduce(const dist::Communicator& comm, const EchoOptions& options)
    : options_(options),
      policy_{options.quant.bits, options.early_site_8bit, options.num_layers},
      engine_(make_segment_reduce(comm, options.transport)),
      exact_(engine_, ExactPrecision::bf16),
      forward_{Compensator(options.coeffs), {}},
      backward_{Compensator(options.coeffs), {}} {
  validate(options_.quant);  // bits and group size, up front
  ECHO_CHECK(!options_.early_site_8bit || options_.num_layers > 0,
             "early_site_8bit needs the number of layers to know which sites are early");
  const auto& k = options_.coeffs;
  ECHO_CHECK(k.eta >= 0 && k.eta <= 1, "compensator eta = {} is outside [0, 1]", k.eta);
  ECHO_CHECK(k.a >= 0 && k.a <= 1, "compensator a = {} is outside [0, 1]", k.a);
  ECHO_CHECK(k.beta1 >= 0 && k.beta1 < 1 && k.beta2 >= 0 && k.beta2 < 1,
             "compensator beta1 = {}, beta2 = {} must lie in [0, 1)", k.beta1, k.beta2);
}

void EchoAllReduce::begin_pass(Direction direction) {
  state(direction).compensator.reset();
  state(direction).telemetry.reset();
  state(direction).path = Path::unset;
  if (device_) device_->begin_pass(direction);
}

void EchoAllReduce::use_path(Site site, Path path) {
  if (!options_.compensate) return;  // no state to keep on either side
  Path& p = state(site.direction).path;
  if (p == Path::unset) p = path;
  ECHO_CHECK(p == path,
             "the Echo all-reduce at {} got a {} tensor but this pass started on the {}: the compensator state lives "
             "on one side, so a pass (and telemetry on or off) must not change device",
             to_string(site), path == Path::device ? "device" : "host", p == Path::device ? "device" : "host");
}

void EchoAllReduce::all_reduce(Tensor& x, Site site) {
  // Telemetry needs the host values (it is logged every comm.telemetry_interval steps), so with
  // it on a device tensor is host-staged like any other; an unquantized direction is the exact
  // all-reduce, host-staged too.
  if (!x.is_cuda() || options_.telemetry || !quantized(site.direction)) return AllReduce::all_reduce(x, site);
  if (options_.num_layers > 0) policy_.layer_of(site);  // range check of the site index
  use_path(site, Path::device);
  if (!device_) device_ = make_device_echo(engine_->comm(), options_.transport);
  ECHO_CHECK(device_ != nullptr, "a device tensor reached the Echo all-reduce at {} but the build has no CUDA",
             to_string(site));
  DeviceEchoCall call;
  call.spec = options_.quant;
  call.spec.bits = bits_for(site);
  call.compensate = options_.compensate;
  call.rescale = site.direction == Direction::backward && options_.backward_rescale;
  call.coeffs = options_.coeffs;
  call.fuse = options_.fuse;
  device_->all_reduce(x, site, call);
}

int EchoAllReduce::bits_for(Site site) const {
  return options_.num_layers > 0 ? policy_.bits_for(site) : options_.quant.bits;
}

size_t EchoAllReduce::wire_bytes_per_rank(size_t n, Site site) const {
  if (!quantized(site.direction)) return exact_.wire_bytes_per_rank(n, site);
  QuantSpec spec = options_.quant;
  spec.bits = bits_for(site);
  return TwoPhaseReduce::wire_bytes_per_rank(n, engine_->comm().size(), engine_->comm().rank(), QuantCodec(spec));
}

int EchoAllReduce::group_rescale_exponent(float local_absmax, Site site) {
  // NOTE: absmax_step maps a non-finite value to +inf, never NaN: MPI_MAX need not propagate NaN.
  const float gmax = engine_->group_max(local_absmax, site);
  check_rescale_max(gmax, site);
  return rescale_exponent(gmax);
}

void EchoAllReduce::fused_all_reduce(std::span<float> x, Site site, const QuantSpec& spec) {
  const std::string site_name = to_string(site);
  Compensator& comp = state(site.direction).compensator;
  comp.prepare(x.size(), site_name.c_str());
  FusedEchoSite hooks(comp, engine_->comm().size());
  if (site.direction == Direction::backward && options_.backward_rescale)
    hooks.set_exponent(group_rescale_exponent(hooks.local_absmax(x), site));
  check_output(engine_->run_fused(x, QuantCodec(spec), site, hooks), site, "Echo quantized");
}

void EchoAllReduce::all_reduce(std::span<float> x, Site site) {
  if (!quantized(site.direction)) return exact_.all_reduce(x, site);
  if (options_.num_layers > 0) policy_.layer_of(site);  // range check of the site index
  use_path(site, Path::host);
  QuantSpec spec = options_.quant;
  spec.bits = bits_for(site);
  if (options_.fuse && options_.compensate && !options_.telemetry && engine_->fuses_tiles())
    return fused_all_reduce(x, site, spec);
  PassState& st = state(site.direction);
  const std::string site_name = to_string(site);

  // x' = x + c (or x' = x without compensation)
  x_comp_.resize(x.size());
  if (options_.telemetry) x_saved_.assign(x.begin(), x.end());
  if (options_.compensate)
    st.compensator.apply(x, x_comp_, site_name.c_str());
  else
    std::copy(x.begin(), x.end(), x_comp_.begin());

  int exponent = 0;
  if (site.direction == Direction::backward && options_.backward_rescale) {
    float local = 0.0f;
    for (float v : x_comp_) local = absmax_step(local, v);
    exponent = group_rescale_exponent(local, site);
  }
  // Element by element: 2^e overflows fp32 for the tiniest gradients (e up to 159).
  for (size_t i = 0; i < x.size(); ++i) x[i] = scale_pow2(x_comp_[i], exponent);

  check_output(engine_->run(x, QuantCodec(spec), site), site, "Echo quantized");
  if (exponent != 0)
    for (float& v : x) v = scale_pow2(v, -exponent);

  if (options_.compensate) st.compensator.update(x_comp_, x, engine_->comm().size());
  if (options_.telemetry) gather_telemetry(x_saved_, x, site, spec.bits, exponent);
}

void EchoAllReduce::gather_telemetry(std::span<const float> x, std::span<const float> y, Site site, int bits,
                                     int exponent) {
  const size_t n = x.size();
  const float p = static_cast<float>(engine_->comm().size());
  tele_.resize(2 * n);
  for (size_t i = 0; i < n; ++i) {
    tele_[i] = x_comp_[i] - y[i] / p;  // u, as the compensator forms it
    tele_[n + i] = x[i];
  }
  check_output(engine_->run(tele_, Fp32Codec(), site), site, "telemetry");
  state(site.direction).telemetry.record(site, bits, exponent, tele_.data() + n, tele_.data(), y.data(), n);
}

}  // namespace echo::comm
