// Builds the all-reduce the config asks for (comm.allreduce, comm.transport, ...), in one
// place, so the model and the benchmarks never branch on implementation names.
#pragma once

#include <memory>

#include "backend/tp_reducer.h"
#include "comm/all_reduce.h"
#include "comm/exact_all_reduce.h"
#include "core/config/config.h"
#include "dist/communicator.h"

namespace echo::comm {

struct EchoOptions;

// The Echo options a config describes (num_layers feeds early_site_8bit).
EchoOptions echo_options_from(const config::CommConfig& cfg, int num_layers);

// The exact sum over group at `precision`: NCCL when device is cuda, the build has NCCL and every
// rank of the group drives its own GPU (NCCL refuses two ranks on one device; the log says when
// it falls back); else, for the 16-bit (bf16) precision under transport cuda_ipc, the pipelined
// device transport (p2p/cuda_ipc_all_reduce.h); otherwise ExactAllReduce over the given
// transport, host-staged for device tensors. Collective over group.
std::unique_ptr<AllReduce> make_exact_all_reduce(const dist::Communicator& group, ExactPrecision precision,
                                                 config::Device device, const TransportOptions& transport = {});

// comm.transport and comm.peer_timeout_s as the host engines take them (cuda_ipc: device tensors of Echo sites, see device_qar.h).
TransportOptions transport_options_from(const config::CommConfig& cfg);

// tp is the tensor-parallel communicator the block sites reduce over; it must outlive the result.
std::unique_ptr<AllReduce> make_all_reduce(const config::CommConfig& cfg, config::Device device,
                                           const dist::Communicator& tp, int num_layers);

// The all-reduce of the vocab-parallel embedding and the LM-head input gradient: nullptr
// (exact) unless comm.embedding_exact is false, then Echo at comm.bits without compensation
// (a lone site has no earlier errors to feed back).
std::unique_ptr<AllReduce> make_edge_all_reduce(const config::CommConfig& cfg, const dist::Communicator& tp);

// The device half of the TP reducer (backend::TpReducer::device): NCCL on device values over tp
// when device is cuda, tp has more than one rank, the build has NCCL, every rank of tp drives its
// own GPU and `transport` is not mpi (which asks for host-staged reductions, as it does of Echo's
// device sites); empty otherwise. Collective over tp.
backend::DeviceReduce make_device_tp_reduce(const dist::Communicator& tp, config::Device device,
                                            TransportKind transport = TransportKind::automatic);

}  // namespace echo::comm
