// Builds the all-reduce the config asks for (comm.allreduce, comm.transport, ...), in one
// place, so the model and the benchmarks never branch on implementation names.
#pragma once

#include <memory>

#include "comm/all_reduce.h"
#include "core/config/config.h"
#include "dist/communicator.h"

namespace echo::comm {

struct EchoOptions;

// The Echo options a config describes (num_layers feeds early_site_8bit).
EchoOptions echo_options_from(const config::CommConfig& cfg, int num_layers);

// tp is the tensor-parallel communicator the block sites reduce over; it must outlive the result.
std::unique_ptr<AllReduce> make_all_reduce(const config::CommConfig& cfg, config::Device device,
                                           const dist::Communicator& tp, int num_layers);

}  // namespace echo::comm
