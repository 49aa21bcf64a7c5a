// The push / reduce / gather / tail rounds over shared memory.
#include "comm/p2p/shm_pipelined_reduce.h"

#include <cstring>

#include "core/error.h"
#include "core/hd.h"
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
  return run_pipeline(x, codec, site, nullptr);
}

size_t ShmPipelinedReduce::run_fused(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks& hooks) {
  // A codec group too large for a slot, or nothing to exchange, still runs tile by tile here: the
  // whole tensor is one tile of the MPI engine.
  const size_t group_bytes = codec.bytes(codec.granularity());
  if (!group_fits_slot(ws_->geometry(), group_bytes) || x.empty() || comm_.size() == 1) {
    staged_.resize(x.size());
    hooks.load(x.data(), 0, x.size(), staged_.data());
    std::vector<float> y = staged_;
    const size_t bad = fallback_.run(y, codec);
    hooks.finish(x.data(), 0, x.size(), y.data());
    return bad;
  }
  return run_pipeline(x, codec, site, &hooks);
}

float ShmPipelinedReduce::group_max(float local, Site site) {
  if (comm_.size() == 1) return local;
  const uint64_t seq = ws_->next_max();
  const int slot = 2 * static_cast<int>(seq % 2);
  uint64_t* mine = ws_->header(ws_->rank());
  std::atomic_ref<uint64_t>(mine[kHeaderMaxValue + slot]).store(float_bits(local), std::memory_order_relaxed);
  publish(&mine[kHeaderMaxSeq + slot], seq);
  const std::string site_name = to_string(site);
  const WaitContext ctx{site_name.c_str(), peer_timeout_s_};
  float global = local;
  for (int p = 0; p < comm_.size(); ++p) {
    if (p == ws_->rank()) continue;
    uint64_t* theirs = ws_->header(p);
    times_.wait_s += wait_for_peer(&theirs[kHeaderMaxSeq + slot], seq, theirs, nullptr, p, "max", ctx);
    const float v = bits_float(static_cast<uint32_t>(
        std::atomic_ref<uint64_t>(theirs[kHeaderMaxValue + slot]).load(std::memory_order_relaxed)));
    global = v > global ? v : global;  // NOTE: callers pass +inf, never NaN, for a non-finite value
  }
  return global;
}

size_t ShmPipelinedReduce::run_pipeline(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks* hooks) {
  const size_t group_bytes = codec.bytes(codec.granularity());
  const PipelineSchedule& s = schedules_.get(x.size(), codec.granularity(), group_bytes);
  const std::string site_name = to_string(site);
  const WaitContext ctx{site_name.c_str(), peer_timeout_s_};
  const CallHeader call{ws_->next_call(), x.size(), codec.bytes(x.size())};
  write_header(ws_->header(ws_->rank()), call);
  ++times_.calls;
  size_t bad = 0;
  for (int r = 0; r < s.rounds; ++r) bad += run_round(x, codec, s, r, call, ctx, hooks);
  return bad;
}

const float* ShmPipelinedReduce::tile_values(std::span<float> x, const Tile& tile, TileHooks* hooks) {
  if (!hooks) return x.data() + tile.begin;
  hooks->load(x.data(), tile.begin, tile.size, staged_.data());
  return staged_.data();
}

size_t ShmPipelinedReduce::run_round(std::span<float> x, const SegmentCodec& codec, const PipelineSchedule& s,
                                     int round, const CallHeader& call, const WaitContext& ctx, TileHooks* hooks) {
  const P2pGeometry& g = ws_->geometry();
  const int P = g.ranks, me = ws_->rank();
  const uint64_t base = ws_->next_round_base();

  // Push: every non-owned tile, encoded into its owner's region.
  if (hooks && staged_.size() < s.tile_elems) staged_.resize(s.tile_elems);
  Stopwatch watch;
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    for (int t = 0; t < g.tiles; ++t) {
      const Tile tile = s.tile(j, round, t);
      if (tile.size == 0) break;
      codec.encode(tile_values(x, tile, hooks), tile.size, ws_->region(j) + g.recv_slot_offset(me, t));
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
    codec.load_own(tile_values(x, tile, hooks), tile.size, sum_.data());
    double waited = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      waited += wait_for_peer(ws_->push_flag(me, t, p), base + kStagePush, ws_->header(p), &call, p, "push", ctx);
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
            wait_for_peer(ws_->gather_flag(me, t, j), base + kStageGather, ws_->header(j), &call, j, "gather", ctx);
      watch.lap();
      const uint8_t* code = ws_->region(me) + g.gather_slot_offset(j, t);
      if (hooks) {
        bad += codec.decode(code, tile.size, staged_.data());
        hooks->finish(x.data(), tile.begin, tile.size, staged_.data());
      } else {
        bad += codec.decode(code, tile.size, x.data() + tile.begin);
      }
      times_.decode_s += watch.lap();
    }
  }
  return bad;
}

}  // namespace echo::comm::p2p
