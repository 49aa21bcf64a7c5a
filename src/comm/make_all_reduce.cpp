// comm.allreduce / comm.transport -> an AllReduce implementation.
#include "comm/make_all_reduce.h"

#include "comm/echo/echo_all_reduce.h"
#include "comm/exact_all_reduce.h"
#include "core/error.h"
#include "core/log.h"
#ifdef ECHO_NCCL
#include "comm/nccl_all_reduce.h"
#include "comm/nccl_group.h"
#endif
#ifdef ECHO_CUDA
#include "comm/p2p/cuda_ipc_all_reduce.h"
#endif

namespace echo::comm {

EchoOptions echo_options_from(const config::CommConfig& cfg, int num_layers) {
  EchoOptions o;
  o.quant = cfg.quant_spec(cfg.bits);
  o.early_site_8bit = cfg.early_site_8bit;
  o.num_layers = num_layers;
  o.compensate = cfg.compensator.enabled;
  o.coeffs = {static_cast<float>(cfg.compensator.eta), static_cast<float>(cfg.compensator.a),
              static_cast<float>(cfg.compensator.beta1), static_cast<float>(cfg.compensator.beta2)};
  o.forward = cfg.forward;
  o.backward = cfg.backward;
  o.backward_rescale = cfg.backward_rescale;
  o.telemetry = cfg.telemetry_interval > 0;
  o.transport = transport_options_from(cfg);
  return o;
}

TransportOptions transport_options_from(const config::CommConfig& cfg) {
  // cuda_ipc serves the device tensors of Echo's quantized sites (device_qar.h); host tensors
  // take the host transports as under auto.
  TransportOptions t;
  switch (cfg.transport) {
    case config::Transport::mpi: t.kind = TransportKind::mpi; break;
    case config::Transport::shm: t.kind = TransportKind::shm; break;
    case config::Transport::cuda_ipc: t.kind = TransportKind::cuda_ipc; break;
    case config::Transport::automatic: t.kind = TransportKind::automatic; break;
  }
  t.peer_timeout_s = cfg.peer_timeout_s;
  t.threads = cfg.shm_threads;
  t.pipelined = cfg.allreduce != config::AllReduceKind::two_collective;
  t.geometry.tiles = cfg.p2p_tiles;
  t.geometry.slot_bytes = static_cast<size_t>(cfg.p2p_slot_kib) << 10;
  return t;
}

std::unique_ptr<AllReduce> make_exact_all_reduce(const dist::Communicator& group, ExactPrecision precision,
                                                 config::Device device, const TransportOptions& transport) {
  if (device == config::Device::cuda && group.size() > 1) {
#ifdef ECHO_NCCL
    if (ranks_have_distinct_gpus(group))
      return std::make_unique<NcclAllReduce>(group, precision);
#endif
#ifdef ECHO_CUDA
    // The 16-bit baseline over the pipelined device transport where it was asked for: it needs no
    // distinct GPUs (for_group is collective; every rank gets here together).
    if (precision == ExactPrecision::bf16 && transport.kind == TransportKind::cuda_ipc && transport.pipelined) {
      std::string why;
      if (auto ws = p2p::CudaIpcWorkspace::for_group(group, transport.geometry, &why))
        return std::make_unique<p2p::CudaIpcBf16AllReduce>(group, std::move(ws), transport);
      if (group.rank() == 0)
        ECHO_INFO("comm", "comm.transport = cuda_ipc is not possible for this group ({}); the exact all-reduce is "
                  "host-staged", why);
      return std::make_unique<ExactAllReduce>(group, precision, transport);
    }
#endif
    if (group.rank() == 0)
      ECHO_INFO("comm", "ranks of one group share a GPU (or the build has no NCCL): the exact all-reduce is "
                "host-staged");
  }
  return std::make_unique<ExactAllReduce>(group, precision, transport);
}

std::unique_ptr<AllReduce> make_all_reduce(const config::CommConfig& cfg, config::Device device,
                                           const dist::Communicator& tp, int num_layers) {
  const TransportOptions transport = transport_options_from(cfg);
  switch (cfg.allreduce) {
    case config::AllReduceKind::exact:
      return make_exact_all_reduce(tp, ExactPrecision::bf16, device, transport);
    case config::AllReduceKind::exact_fp32:
      return make_exact_all_reduce(tp, ExactPrecision::fp32, device, transport);
    case config::AllReduceKind::echo:
    case config::AllReduceKind::two_collective:  // Echo's arithmetic; transport.pipelined = false
      return std::make_unique<EchoAllReduce>(tp, echo_options_from(cfg, num_layers));
  }
  ECHO_FAIL("unhandled comm.allreduce value");
}

std::unique_ptr<AllReduce> make_edge_all_reduce(const config::CommConfig& cfg, const dist::Communicator& tp) {
  if (cfg.embedding_exact ||
      (cfg.allreduce != config::AllReduceKind::echo && cfg.allreduce != config::AllReduceKind::two_collective))
    return nullptr;
  EchoOptions o = echo_options_from(cfg, 0);
  o.early_site_8bit = false;
  o.compensate = false;
  o.telemetry = false;
  return std::make_unique<EchoAllReduce>(tp, o);
}

backend::DeviceReduce make_device_tp_reduce(const dist::Communicator& tp, config::Device device,
                                            TransportKind transport) {
#ifdef ECHO_NCCL
  if (device == config::Device::cuda && transport != TransportKind::mpi && tp.size() > 1 &&
      ranks_have_distinct_gpus(tp)) {
    std::shared_ptr<NcclGroup> group = NcclGroup::for_group(tp);
    return [group](void* data, int64_t n, DType dtype, backend::ReduceOp op, void* stream) {
      // NOTE: n is the same on every rank, so skipping an empty call skips it everywhere.
      if (n > 0) group->all_reduce(data, static_cast<size_t>(n), dtype, op, static_cast<cudaStream_t>(stream));
    };
  }
#else
  (void)tp;
  (void)device;
  (void)transport;
#endif
  return {};
}

}  // namespace echo::comm
