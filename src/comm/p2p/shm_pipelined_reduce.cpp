// The push / reduce / gather / tail rounds over shared memory.
#include "comm/p2p/shm_pipelined_reduce.h"

#include <cstring>

#include "core/error.h"
#include "core/stopwatch.h"
#include "core/log.h"

namespace echo::comm::p2p {


ShmPipelinedReduce::ShmPipelinedReduce(const dist::Communicator& comm, std::shared_ptr<ShmWorkspace> workspace,
                                       double peer_timeout_s)
    : comm_(comm),
      ws_(std::move(workspace)),
      peer_timeout_s_(peer_timeout_s),
      schedules_(ws_->geometry()),
      fallback_(comm) {
  ECHO_CHECK(ws_->geometry().ranks == comm.size(), "shm workspace made for {} ranks used by a group of {}",
             ws_->geometry().ranks, comm.size());
}

size_t ShmPipelinedReduce::run(std::span<float> x, const SegmentCodec& codec, Site site) {
  const size_t group_bytes = codec.bytes(codec.granularity());
  if (!group_fits_slot(ws_->geometry(), group_bytes)) return fallback_.run(x, codec);  // same bits, over MPI
  if (x.empty() || comm_.size() == 1) return fallback_.run(x, codec);  // nothing to move: no flags
  const PipelineSchedule& s = schedules_.get(x.size(), codec.granularity(), group_bytes);
  const std::string site_name = to_string(site);
  const WaitContext ctx{site_name.c_str(), peer_timeout_s_};
  const CallHeader call{ws_->next_call(), x.size(), codec.bytes(x.size())};
  write_header(ws_->header(ws_->rank()), call);
  ++times_.calls;
  size_t bad = 0;
  for (int r = 0; r < s.rounds; ++r) bad += run_round(x, codec, s, r, call, ctx);
  return bad;
}

size_t ShmPipelinedReduce::run_round(std::span<float> x, const SegmentCodec& codec, const PipelineSchedule& s,
                                     int round, const CallHeader& call, const WaitContext& ctx) {
  const P2pGeometry& g = ws_->geometry();
  const int P = g.ranks, me = ws_->rank();
  const uint64_t base = ws_->next_round_base();

  // Push: every non-owned tile, encoded into its owner's region.
  Stopwatch watch;
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    for (int t = 0; t < g.tiles; ++t) {
      const Tile tile = s.tile(j, round, t);
      if (tile.size == 0) break;
      codec.encode(x.data() + tile.begin, tile.size, ws_->region(j) + g.recv_slot_offset(me, t));
      publish(ws_->push_flag(j, t, me), base + kStagePush);
    }
  }
  times_.encode_s += watch.lap();

  // Reduce and gather, tile by tile of the own segment, as the peers' copies arrive.
  if (sum_.size() < s.tile_elems) sum_.resize(s.tile_elems);
  for (int t = 0; t < g.tiles; ++t) {
    const Tile tile = s.tile(me, round, t);
    if (tile.size == 0) break;
    watch.lap();
    codec.load_own(x.data() + tile.begin, tile.size, sum_.data());
    double waited = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      waited += wait_for_peer(ws_->push_flag(me, t, p), base + kStagePush, ws_->header(p), call, p, "push", ctx);
      // The peer wrote its header before its first push and cannot start another call before this
      // rank's gather, so its header is this call's: a different length or codec is caught here.
      if (round == 0 && t == 0) check_same_call(ws_->header(p), call, p, ctx);
      codec.decode_add(ws_->region(me) + g.recv_slot_offset(p, t), tile.size, sum_.data());
    }
    times_.wait_s += waited;
    times_.reduce_s += watch.lap() - waited;
    uint8_t* own_code = ws_->region(me) + g.gather_slot_offset(me, t);
    codec.encode(sum_.data(), tile.size, own_code);
    times_.encode_s += watch.lap();
    const size_t bytes = codec.bytes(tile.size);
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      std::memcpy(ws_->region(p) + g.gather_slot_offset(me, t), own_code, bytes);
      publish(ws_->gather_flag(p, t, me), base + kStageGather);
    }
    times_.copy_s += watch.lap();
  }

  // Tail: every owner's encoded sum, the own one included, decoded into x.
  size_t bad = 0;
  for (int j = 0; j < P; ++j) {
    for (int t = 0; t < g.tiles; ++t) {
      const Tile tile = s.tile(j, round, t);
      if (tile.size == 0) break;
      if (j != me)
        times_.wait_s +=
            wait_for_peer(ws_->gather_flag(me, t, j), base + kStageGather, ws_->header(j), call, j, "gather", ctx);
      watch.lap();
      bad += codec.decode(ws_->region(me) + g.gather_slot_offset(j, t), tile.size, x.data() + tile.begin);
      times_.decode_s += watch.lap();
    }
  }
  return bad;
}

}  // namespace echo::comm::p2p
