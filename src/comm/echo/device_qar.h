// Echo on a CUDA device (GitHub issue 9 §2; pipelined over cuda_ipc, issue 11): the per-site flow of EchoAllReduce
// (compensate, backward rescale, QAR, unscale, compensator update) on a contiguous f32 or bf16
// device tensor, without host copies of the values. Only the packed quantized bytes cross the
// host, because MPI here is not CUDA-aware: 4-bit bytes are about 1/8 of the fp32 values.
//
// Bitwise equal to the CPU EchoAllReduce on the f32 values by construction: the kernels call
// the same ECHO_HD element functions (compensator_math.h, rescale.h, quantizer.h through
// kernels/quantize.cu), the segments and wire layout are those of segments.h / quantize.h, the
// owner adds the P-1 decoded copies in rank order (one kernel launch per copy, in stream order),
// and the group max is a max (order-free). A bf16 tensor is widened exactly to f32, reduced
// like the CPU reduces those f32 values, and rounded to bf16 once at the end, so its result is
// the CPU's f32 result rounded to bf16.
//
// Stream: every kernel and copy runs on cudaStreamLegacy, the legacy default stream, which
// orders with the CUDA backend's one blocking stream in both directions (and with Tensor's own
// copies), so no event is needed. Each call synchronizes with the host a few times (the group
// max, the two byte exchanges, the poisoned-group count).
//
// Only built with the CUDA backend (src/comm/CMakeLists.txt); this header names no CUDA type,
// so EchoAllReduce includes it in every build and make_device_echo returns null without CUDA.
#pragma once

#include <memory>
#include <vector>

#include "comm/all_reduce.h"
#include "comm/echo/compensator_math.h"
#include "comm/segment_reduce.h"
#include "core/quant_spec.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace echo::comm {

// What one site asks of the device path (EchoAllReduce decides it from its options and the site).
struct DeviceEchoCall {
  QuantSpec spec;  // the bits of this site already applied
  bool compensate = true;
  bool rescale = false;  // backward rescaling (backward sites with comm.backward_rescale only)
  CompensatorCoeffs coeffs;
  // Over cuda_ipc, compensate and rescale tile by tile inside the pipeline (x' never written);
  // same bits as unfused, which the other transports always run.
  bool fuse = true;
};

class DeviceEcho {
 public:
  virtual ~DeviceEcho() = default;
  // Forgets the compensator state of a direction; the pass's first site sizes it from zero.
  virtual void begin_pass(Direction direction) = 0;
  // x <- Echo sum of x over the group; x contiguous f32 or bf16 on the device. Throws the CPU
  // path's errors (size change within a pass, non-finite rescale max, poisoned output); where NCCL
  // moves the bytes the last two are noted on the device and raised by raise_deferred_faults.
  virtual void all_reduce(Tensor& x, Site site, const DeviceEchoCall& call) = 0;
  // Raises a fault noted without a wait since the last call (where NCCL moves the bytes, the
  // rescale max's and the output's NaN/Inf checks are noted on the device); one wait when any
  // call deferred, none otherwise. The model calls it once per step, with the loss read.
  virtual void raise_deferred_faults() = 0;
  // Host copies of the compensator state (empty before the pass's first compensated site).
  virtual std::vector<float> m1(Direction direction) const = 0;
  virtual std::vector<float> m2(Direction direction) const = 0;
  // How the quantized bytes travel: "cuda_ipc" (the pipelined transport) or "mpi (host-staged)";
  // "unset" before the first call.
  virtual const char* transport() const = 0;
};

// The device path over the group; null when the build has no CUDA backend. Allocates nothing
// on the device until its first call. With transport.kind == cuda_ipc the bytes go through the
// pipelined CUDA IPC transport (p2p/cuda_ipc_reduce.h) where the workspace can be made (else the
// log says why and they are host-staged over MPI), and a codec group too large for a slot is
// host-staged; any other kind host-stages them.
std::unique_ptr<DeviceEcho> make_device_echo(const dist::Communicator& comm, const TransportOptions& transport);

}  // namespace echo::comm
