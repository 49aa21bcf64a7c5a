// The pipelined peer-to-peer quantized all-reduce on CUDA devices (comm.transport: cuda_ipc;
// docs/design.md §7, "Pipelined peer-to-peer transport"; Echo paper Sec. 4.2 and Appendix C):
// the protocol of ShmPipelinedReduce — the same regions, tiles, rounds, flag values and
// arithmetic order — with the stages as kernels on three streams of this rank:
//   push    stream: quantize each non-owned tile straight into its owner's recv slot (through
//           the IPC mapping), then publish the owner's push flag (tile, me)
//   reduce  stream: per own tile, wait for the peers' push flags, add their decoded copies to
//           the own values in rank order (fp32), quantize the sum into the own gather slot, copy
//           it into every peer's gather slot, publish the gather flags
//   tail    stream: per tile of every owner, wait for its gather flag, decode into y
// Within the GPU the streams are ordered by CUDA events: the tail of a round after its reduce
// (the own tiles), the next round's push and reduce after this round's tail (slot reuse, the same
// argument as on CPU); across ranks and GPUs only by the flags. So a rank reduces its tile 0 while
// a slower peer still pushes tile 5. The host waits once per call, for the poisoned-group count
// and the fault record of the waits (timeout, out-of-step or mismatched peer: an error naming the
// site, the stage and the peer).
// run_fused() lets an Echo site work per tile (DeviceTileHooks): x' is formed into a tile buffer
// as a tile is pushed or loaded by its owner, and the decoded sum finished (unscaled, compensator
// updated, output written) in the tail, as ShmPipelinedReduce::run_fused does on CPU.
// Bitwise equal to TwoPhaseReduce with QuantCodec on the same values: tiles are whole groups, the
// device quantizer's bytes are the CPU's, and the owner adds in the CPU's order.
// Built only with the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "comm/all_reduce.h"
#include "comm/p2p/cuda_ipc_workspace.h"
#include "comm/p2p/pipeline_schedule.h"
#include "core/quant_spec.h"
#include "core/stopwatch.h"
#include "dist/communicator.h"
#include "p2p_flags.cuh"  // P2pCallHeader, P2pFaultRecord (plain C++)

namespace echo::cuda {
struct DeviceQuantReport;
}  // namespace echo::cuda

namespace echo::comm::p2p {

// What an Echo site does to each tile around the exchange, on the device (the CUDA twin of
// TileHooks, segment_reduce.h): load() writes the values to send for elements [begin, begin + n)
// into a tile buffer, finish() takes the decoded sum of those elements from one and writes the
// site's output. Both enqueue kernels on the given stream.
class DeviceTileHooks {
 public:
  virtual ~DeviceTileHooks() = default;
  // Once per call before the first load, after the group max of a rescaling call (run_fused's
  // max_bits) is known on the device: where the site derives its exponent from it.
  virtual void begin(cudaStream_t /*stream*/) {}
  virtual void load(size_t begin, size_t n, float* out, cudaStream_t stream) = 0;
  virtual void finish(size_t begin, size_t n, const float* sum, cudaStream_t stream) = 0;
};

class CudaIpcReduce {
 public:
  CudaIpcReduce(const dist::Communicator& comm, std::shared_ptr<CudaIpcWorkspace> workspace, double peer_timeout_s);
  ~CudaIpcReduce();
  CudaIpcReduce(const CudaIpcReduce&) = delete;
  CudaIpcReduce& operator=(const CudaIpcReduce&) = delete;

  // Whether a call of n elements with this spec goes through the pipeline (else the caller's
  // two-collective path: a group too large for a slot, or nothing to move).
  bool pipelines(size_t n, const QuantSpec& spec) const;
  // y[0, n) (device, f32, in place) <- the quantized sum over the group. Ordered after the work
  // on the legacy default stream and before what follows it there; returns when done. Returns the
  // poisoned groups decoded, as the two-collective path does. Throws on a peer fault; the
  // transport is then unusable (the ranks are out of step) and every later call throws.
  size_t run(float* y, size_t n, const QuantSpec& spec, Site site) {
    return run_pipeline(y, n, CallCodec{spec, false}, site, nullptr);
  }
  // run() with the site's per-tile work fused in: the values sent are what hooks.load() makes of
  // each tile (the whole x' is never written), and hooks.finish() gets each decoded tile.
  // group_max_bits (device; null: none): the bits of this rank's max |x'| of a rescaling site,
  // replaced by the group's max through the workspace headers before hooks.begin(), all on the
  // device (the backward rescale's one scalar without a host wait or an MPI call).
  size_t run_fused(size_t n, const QuantSpec& spec, Site site, DeviceTileHooks& hooks,
                   uint32_t* group_max_bits = nullptr) {
    return run_pipeline(nullptr, n, CallCodec{spec, false}, site, &hooks, group_max_bits);
  }

  // The 16-bit baseline over the same pipeline (bits 16 in the Echo paper's Table 2): bf16 values
  // on the wire, the owner's own values rounded to bf16 before the fp32 sum, the sum rounded once
  // more: comm::Bf16Codec's arithmetic, so bitwise equal to ExactAllReduce (bf16) on the host.
  // Unlike NCCL it works when ranks share a GPU. Returns the non-finite outputs.
  bool pipelines_bf16(size_t n) const;
  size_t run_bf16(float* y, size_t n, Site site) { return run_pipeline(y, n, CallCodec{{}, true}, site, nullptr); }

  size_t cached_schedules() const { return schedules_.size(); }

 private:
  struct Counters;
  // What a call moves: Echo's group-quantized codes (spec), or bf16 values (the 16-bit baseline).
  struct CallCodec {
    QuantSpec spec;
    bool bf16 = false;
    size_t group() const;           // elements per codec group (tiles are whole groups)
    size_t bytes(size_t n) const;   // wire bytes of n elements
  };
  size_t run_pipeline(float* y, size_t n, const CallCodec& codec, Site site, DeviceTileHooks* hooks,
                      uint32_t* group_max_bits = nullptr);
  // Queues one call's stages on the three streams and waits for them; run_pipeline moved the
  // group's counters first and turns an exception here into a broken group.
  void enqueue_call(float* y, const CallCodec& codec, const PipelineSchedule& s, DeviceTileHooks* hooks,
                    uint32_t* group_max_bits, uint64_t max_seq, uint64_t first_base);
  void run_round(float* y, DeviceTileHooks* hooks, const CallCodec& codec, const PipelineSchedule& s, int round,
                 uint64_t base);
  // The codec's stage operations on `stream` (the decoders count poisoned / non-finite outputs).
  void encode(const CallCodec& codec, const float* x, size_t n, uint8_t* out, cudaStream_t stream);
  void decode_add(const CallCodec& codec, const uint8_t* in, size_t n, float* acc, cudaStream_t stream);
  void decode(const CallCodec& codec, const uint8_t* in, size_t n, float* out, cudaStream_t stream);
  void reserve_tiles(size_t tile_elems);
  void throw_fault(const cuda::P2pFaultRecord& fault, Site site) const;
  // The limit for the device's waits (0: none; core/stopwatch.h: a positive sub-ns limit is 1 ns,
  // never "none", and inf is clamped).
  uint64_t timeout_ns() const { return static_cast<uint64_t>(limit_ns(peer_timeout_s_)); }

  const dist::Communicator& comm_;
  std::shared_ptr<CudaIpcWorkspace> ws_;
  double peer_timeout_s_;
  std::vector<int> world_ranks_;  // of the group's ranks: what a timeout message names
  ScheduleCache schedules_;
  cudaStream_t push_ = nullptr, reduce_ = nullptr, tail_ = nullptr;
  cudaEvent_t start_ = nullptr, reduced_ = nullptr, tailed_ = nullptr;
  Counters* counters_ = nullptr;  // device memory
  // Fused calls: one tile buffer per stage stream (stream order serializes its tiles).
  float* push_tile_ = nullptr;
  float* reduce_tile_ = nullptr;
  float* tail_tile_ = nullptr;
  size_t tile_capacity_ = 0;
  cuda::P2pCallHeader header_;  // the call in flight
  bool broken_ = false;
};

}  // namespace echo::comm::p2p
