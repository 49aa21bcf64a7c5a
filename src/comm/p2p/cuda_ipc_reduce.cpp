// The push / reduce / gather / tail rounds on CUDA streams (cuda_ipc_reduce.h).
// NOTE: never run on a GPU when written; cuda_ipc_reduce_gpu_mpi_test checks it bitwise against
// TwoPhaseReduce, and scripts/device_check.sh runs that test and the benchmark.
#include "comm/p2p/cuda_ipc_reduce.h"

#include "bf16_codec.cuh"
#include "comm/echo/quantize.h"
#include "comm/p2p/peer_flags.h"
#include "core/error.h"
#include "core/seconds_text.h"
#include "cuda_check.h"
#include "p2p_flags.cuh"
#include "quantize.cuh"

namespace echo::comm::p2p {

struct CudaIpcReduce::Counters {
  cuda::DeviceQuantReport decoded;  // the poisoned groups decoded (the count run() returns)
  cuda::DeviceQuantReport encoded;  // discarded, as the CPU discards it
  cuda::P2pFaultRecord fault;
};

CudaIpcReduce::CudaIpcReduce(const dist::Communicator& comm, std::shared_ptr<CudaIpcWorkspace> workspace,
                             double peer_timeout_s)
    : comm_(comm),
      ws_(std::move(workspace)),
      peer_timeout_s_(peer_timeout_s),
      world_ranks_(comm.world_ranks()),
      schedules_(ws_->geometry()) {
  ECHO_CHECK(ws_->geometry().ranks == comm.size(), "cuda_ipc workspace made for {} ranks used by a group of {}",
             ws_->geometry().ranks, comm.size());
  // A wait kernel without a timeout would hang the stream, and with it the process's exit.
  ECHO_CHECK(peer_timeout_s > 0, "the cuda_ipc transport needs comm.peer_timeout_s > 0, got {}", peer_timeout_s);
  // Blocking streams: they order with the legacy default stream, where the device Echo path and
  // the CUDA backend's copies run, in both directions.
  for (cudaStream_t* s : {&push_, &reduce_, &tail_}) CUDA_CHECK(cudaStreamCreate(s));
  for (cudaEvent_t* e : {&start_, &reduced_, &tailed_}) CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  void* counters = nullptr;
  CUDA_CHECK(cudaMalloc(&counters, sizeof(Counters)));
  counters_ = static_cast<Counters*>(counters);
}

CudaIpcReduce::~CudaIpcReduce() {
  for (cudaStream_t s : {push_, reduce_, tail_}) cudaStreamSynchronize(s);  // nothing queued uses what is freed
  cudaFree(counters_);
  for (float* b : {push_tile_, reduce_tile_, tail_tile_}) cudaFree(b);
  for (cudaEvent_t e : {start_, reduced_, tailed_}) cudaEventDestroy(e);
  for (cudaStream_t s : {push_, reduce_, tail_}) cudaStreamDestroy(s);
}

bool CudaIpcReduce::pipelines(size_t n, const QuantSpec& spec) const {
  return group_fits_slot(ws_->geometry(), QuantCodec(spec)) && n > 0 && comm_.size() > 1;
}

bool CudaIpcReduce::pipelines_bf16(size_t n) const {
  return group_fits_slot(ws_->geometry(), Bf16Codec()) && n > 0 && comm_.size() > 1;
}

// The shape of the wire is the host codec's (one definition): the segments and tiles fall where
// the host engine's do, and the slots hold the same bytes.
size_t CudaIpcReduce::CallCodec::group() const {
  return bf16 ? Bf16Codec().granularity() : QuantCodec(spec).granularity();
}

size_t CudaIpcReduce::CallCodec::bytes(size_t n) const { return bf16 ? Bf16Codec().bytes(n) : QuantCodec(spec).bytes(n); }

void CudaIpcReduce::encode(const CallCodec& codec, const float* x, size_t n, uint8_t* out, cudaStream_t stream) {
  if (codec.bf16)
    cuda::bf16_encode(x, n, out, stream);
  else
    cuda::quantize(x, n, codec.spec, out, &counters_->encoded, stream);
}

void CudaIpcReduce::decode_add(const CallCodec& codec, const uint8_t* in, size_t n, float* acc, cudaStream_t stream) {
  if (codec.bf16)
    cuda::bf16_decode_add(in, n, acc, stream);
  else
    cuda::dequantize_add(in, n, codec.spec, acc, &counters_->encoded, stream);
}

void CudaIpcReduce::decode(const CallCodec& codec, const uint8_t* in, size_t n, float* out, cudaStream_t stream) {
  if (codec.bf16)
    cuda::bf16_decode(in, n, out, &counters_->decoded, stream);
  else
    cuda::dequantize(in, n, codec.spec, out, &counters_->decoded, stream);
}

void CudaIpcReduce::reserve_tiles(size_t tile_elems) {
  if (tile_elems <= tile_capacity_) return;
  for (float** b : {&push_tile_, &reduce_tile_, &tail_tile_}) {
    cudaFree(*b);
    *b = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(b), tile_elems * sizeof(float)));
  }
  tile_capacity_ = tile_elems;
}

size_t CudaIpcReduce::run_pipeline(float* y, size_t n, const CallCodec& codec, Site site, DeviceTileHooks* hooks,
                                   uint32_t* group_max_bits) {
  ECHO_CHECK(!broken_,
             "cuda_ipc all-reduce at {}: an earlier call of this group failed on a peer, so the ranks are out of "
             "step; restart the job",
             to_string(site));
  ECHO_CHECK(codec.bf16 ? pipelines_bf16(n) : pipelines(n, codec.spec),
             "cuda_ipc all-reduce at {}: {} elements with group size {} cannot be pipelined", to_string(site), n,
             codec.group());
  ECHO_CHECK(hooks == nullptr || !codec.bf16, "cuda_ipc all-reduce at {}: the bf16 transport has no fused site",
             to_string(site));
  const size_t group = codec.group();
  const PipelineSchedule& s = schedules_.get(n, group, codec.bytes(group));
  if (hooks != nullptr) reserve_tiles(s.largest_tile);  // before the counters move: it may throw
  RegionTable& t = ws_->table();
  header_ = {t.next_call(), n, codec.bytes(n)};
  const uint64_t max_seq = group_max_bits != nullptr ? t.next_max() : 0;
  const uint64_t first_base = t.reserve_rounds(s.rounds);
  try {
    enqueue_call(y, codec, s, hooks, group_max_bits, max_seq, first_base);
  } catch (...) {
    // The group's counters have moved and part of the call may be queued (wait kernels end at
    // their timeout): this group is out of step. Let the queued work end before the error leaves.
    broken_ = true;
    for (cudaStream_t st : {push_, reduce_, tail_}) cudaStreamSynchronize(st);
    throw;
  }
  Counters host{};
  CUDA_CHECK(cudaMemcpy(&host, counters_, sizeof host, cudaMemcpyDeviceToHost));
  if (host.fault.fault != cuda::kP2pNoFault) {
    broken_ = true;
    throw_fault(host.fault, site);
  }
  return static_cast<size_t>(host.decoded.bad_groups);
}

void CudaIpcReduce::enqueue_call(float* y, const CallCodec& codec, const PipelineSchedule& s, DeviceTileHooks* hooks,
                                 uint32_t* group_max_bits, uint64_t max_seq, uint64_t first_base) {
  RegionTable& t = ws_->table();
  // Start: clear the counters on the legacy default stream. NOTE: that op waits for all earlier
  // work of every blocking stream (the CUDA backend computes x on one of its own), and the three
  // stage streams are blocking, so everything after it on them sees x complete. Then announce
  // the call and let the other streams follow.
  CUDA_CHECK(cudaMemsetAsync(counters_, 0, sizeof(Counters), cudaStreamLegacy));
  cuda::reset_report(&counters_->decoded, cudaStreamLegacy);  // first_bad_element starts at ~0, not 0
  cuda::reset_report(&counters_->encoded, cudaStreamLegacy);
  cuda::p2p_write_header(t.header(t.rank()), header_, push_);
  if (group_max_bits != nullptr) {  // the rescale's scalar first: every load of the call depends on it
    cuda::P2pFlagList peers;
    for (int p = 0; p < comm_.size(); ++p) {
      if (p == t.rank()) continue;
      peers.peer[peers.count] = p;
      peers.peer_header[peers.count] = t.header(p);
      ++peers.count;
    }
    cuda::p2p_group_max_bits(t.header(t.rank()), peers, header_, max_seq, group_max_bits, timeout_ns(),
                             &counters_->fault, push_);
  }
  if (hooks != nullptr) hooks->begin(push_);
  CUDA_CHECK(cudaEventRecord(start_, push_));
  CUDA_CHECK(cudaStreamWaitEvent(reduce_, start_, 0));
  CUDA_CHECK(cudaStreamWaitEvent(tail_, start_, 0));
  for (int r = 0; r < s.rounds; ++r)
    run_round(y, hooks, codec, s, r, first_base + static_cast<uint64_t>(r) * kStagesPerRound);

  // One wait on the host per call: everything is done once the tail is (it follows the reduce,
  // and the push of each tile precedes the gather that the tail waited for).
  for (cudaStream_t st : {push_, reduce_, tail_}) CUDA_CHECK(cudaStreamSynchronize(st));
}

void CudaIpcReduce::run_round(float* y, DeviceTileHooks* hooks, const CallCodec& codec, const PipelineSchedule& s,
                              int round, uint64_t base) {
  RegionTable& t = ws_->table();
  const int P = comm_.size(), me = t.rank(), tiles = t.geometry().tiles;
  const uint64_t timeout = timeout_ns();
  const cuda::P2pCallHeader mine = header_;
  if (round > 0) {  // the slots of the last round are free once its tail has seen every gather
    CUDA_CHECK(cudaStreamWaitEvent(push_, tailed_, 0));
    CUDA_CHECK(cudaStreamWaitEvent(reduce_, tailed_, 0));
  }

  // Push: every non-owned tile into its owner's recv slot (me, tile).
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    for (int k = 0; k < tiles; ++k) {
      const Tile tile = s.tile(j, round, k);
      if (tile.size == 0) break;
      if (hooks != nullptr) hooks->load(tile.begin, tile.size, push_tile_, push_);
      const float* values = hooks != nullptr ? push_tile_ : y + tile.begin;
      encode(codec, values, tile.size, t.recv_slot(j, me, k), push_);
      cuda::P2pFlagList flag;
      flag.count = 1;
      flag.flag[0] = t.push_flag(j, k, me);
      cuda::p2p_publish(flag, base + kStagePush, &counters_->fault, push_);
    }
  }

  // Reduce and gather, tile by tile of the own segment, as the peers' copies arrive.
  cuda::P2pFlagList pushed, gathered;
  for (int p = 0; p < P; ++p) {
    if (p == me) continue;
    pushed.peer[pushed.count] = p;
    pushed.peer_header[pushed.count] = t.header(p);
    ++pushed.count;
    ++gathered.count;
  }
  for (int k = 0; k < tiles; ++k) {
    const Tile tile = s.tile(me, round, k);
    if (tile.size == 0) break;
    for (int i = 0; i < pushed.count; ++i) pushed.flag[i] = t.push_flag(me, k, pushed.peer[i]);
    cuda::p2p_wait(pushed, base + kStagePush, mine, kStagePush, k, timeout, &counters_->fault, reduce_);
    // The own values are y's (kept unencoded, as QuantCodec::load_own keeps them; rounded to bf16 in
    // place, as Bf16Codec::load_own rounds them), or what the hooks load; the copies are added in
    // rank order, one launch each, so stream order is rank order.
    if (hooks != nullptr) hooks->load(tile.begin, tile.size, reduce_tile_, reduce_);
    float* sum = hooks != nullptr ? reduce_tile_ : y + tile.begin;
    if (codec.bf16) cuda::bf16_round(sum, tile.size, reduce_);
    for (int i = 0; i < pushed.count; ++i)
      // The decoded copies' poisoned groups are not counted (the sum's decode counts them), as on CPU.
      decode_add(codec, t.recv_slot(me, pushed.peer[i], k), tile.size, sum, reduce_);
    uint8_t* own_code = t.gather_slot(me, me, k);
    encode(codec, sum, tile.size, own_code, reduce_);
    const size_t bytes = codec.bytes(tile.size);
    for (int i = 0; i < pushed.count; ++i) {
      const int p = pushed.peer[i];
      CUDA_CHECK(cudaMemcpyAsync(t.gather_slot(p, me, k), own_code, bytes, cudaMemcpyDeviceToDevice, reduce_));
      gathered.flag[i] = t.gather_flag(p, k, me);
    }
    cuda::p2p_publish(gathered, base + kStageGather, &counters_->fault, reduce_);
  }
  CUDA_CHECK(cudaEventRecord(reduced_, reduce_));

  // Tail: every owner's encoded sum, the own one included (after the own reduce), decoded into y.
  CUDA_CHECK(cudaStreamWaitEvent(tail_, reduced_, 0));
  for (int j = 0; j < P; ++j) {
    for (int k = 0; k < tiles; ++k) {
      const Tile tile = s.tile(j, round, k);
      if (tile.size == 0) break;
      if (j != me) {
        cuda::P2pFlagList flag;
        flag.count = 1;
        flag.flag[0] = t.gather_flag(me, k, j);
        flag.peer[0] = j;
        flag.peer_header[0] = t.header(j);
        cuda::p2p_wait(flag, base + kStageGather, mine, kStageGather, k, timeout, &counters_->fault, tail_);
      }
      if (hooks != nullptr) {
        decode(codec, t.gather_slot(me, j, k), tile.size, tail_tile_, tail_);
        hooks->finish(tile.begin, tile.size, tail_tile_, tail_);
      } else {
        decode(codec, t.gather_slot(me, j, k), tile.size, y + tile.begin, tail_);
      }
    }
  }
  CUDA_CHECK(cudaEventRecord(tailed_, tail_));
}

void CudaIpcReduce::throw_fault(const cuda::P2pFaultRecord& fault, Site site) const {
  const char* stage = fault.stage == kStagePush                ? "push"
                      : fault.stage == kStageGather            ? "gather"
                      : fault.stage == cuda::kP2pStageGroupMax ? "rescale max"
                                                               : "?";
  const std::string where = to_string(site);
  // The max precedes the tiles: it names no tile.
  const std::string tile = fault.stage == cuda::kP2pStageGroupMax ? "" : fmt::format(" (tile {})", fault.tile);
  switch (fault.fault) {
    case cuda::kP2pTimeout:  // a run error, as the shm transport's (peer_flags.cpp)
      ECHO_RUN_FAIL(
          "cuda_ipc all-reduce at {}: timed out after {} s in the {} stage{} waiting for {} "
          "(comm.peer_timeout_s = {}); {}",
          where, seconds_text(static_cast<double>(fault.waited_ns) * 1e-9), stage, tile,
          p2p::peer_name(&world_ranks_, fault.peer), peer_timeout_s_,
          p2p::peer_timeout_cause(&world_ranks_, fault.peer));
    case cuda::kP2pOutOfStep:
      ECHO_CHECK(fault.observed != cuda::kP2pPoison,
                 "cuda_ipc all-reduce at {}: {} failed in this call (in the {} stage here; its own error names "
                 "the cause)",
                 where, p2p::peer_name(&world_ranks_, fault.peer), stage);
      ECHO_FAIL(
          "cuda_ipc all-reduce at {}: {} is out of step in the {} stage (flag {} where {} was expected): the "
          "ranks of the group made different sequences of calls",
          where, p2p::peer_name(&world_ranks_, fault.peer), stage, fault.observed, fault.expected);
    case cuda::kP2pMismatch:
      ECHO_FAIL(
          "cuda_ipc all-reduce at {}: {} called with {} elements ({} encoded bytes), this rank with {} ({} "
          "bytes): every rank of the group must reduce a tensor of the same length with the same codec",
          where, p2p::peer_name(&world_ranks_, fault.peer), fault.observed, fault.expected, header_.n, header_.wire);
    default:
      ECHO_FAIL("cuda_ipc all-reduce at {}: unknown fault code {} from the device", where, fault.fault);
  }
}

}  // namespace echo::comm::p2p
