// The push / reduce / gather / tail rounds over shared memory.
#include "comm/p2p/shm_pipelined_reduce.h"

#include <cstring>

#include "core/error.h"
#include "core/hd.h"
#include "core/stopwatch.h"

namespace echo::comm::p2p {

namespace {
// Checked before the pool starts any thread for them.
int checked_threads(int threads, const P2pGeometry& g) {
  ECHO_CHECK(threads >= 1 && threads <= g.tiles, "shm all-reduce threads = {} must lie in [1, {}] (the tiles of a round)",
             threads, g.tiles);
  return threads;
}
}  // namespace

ShmPipelinedReduce::ShmPipelinedReduce(const dist::Communicator& comm, std::shared_ptr<ShmWorkspace> workspace,
                                       double peer_timeout_s, int threads)
    : comm_(comm),
      ws_(std::move(workspace)),
      peer_timeout_s_(peer_timeout_s),
      world_ranks_(comm.world_ranks()),
      schedules_(ws_->geometry()),
      fallback_(comm),
      pool_(checked_threads(threads, ws_->geometry())) {
  ECHO_CHECK(ws_->geometry().ranks == comm.size(), "shm workspace made for {} ranks used by a group of {}",
             ws_->geometry().ranks, comm.size());
  lanes_.resize(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) lanes_[static_cast<size_t>(i)].index = i;
}

bool ShmPipelinedReduce::pipelines(std::span<const float> x, const SegmentCodec& codec) const {
  // A codec group too large for a slot goes over MPI (same bits); so does a call with nothing to
  // move, which needs no flags.
  return group_fits_slot(ws_->geometry(), codec) && !x.empty() && comm_.size() > 1;
}

size_t ShmPipelinedReduce::run(std::span<float> x, const SegmentCodec& codec, Site site) {
  if (!pipelines(x, codec)) return fallback_.run(x, codec);
  return run_pipeline(x, codec, site, nullptr);
}

size_t ShmPipelinedReduce::run_fused(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks& hooks) {
  if (!pipelines(x, codec)) {  // still tile by tile: the whole tensor is one tile of the MPI engine
    std::vector<float> y(x.size());
    hooks.load(x.data(), 0, x.size(), y.data());
    const size_t bad = fallback_.run(y, codec);
    hooks.finish(x.data(), 0, x.size(), y.data());
    return bad;
  }
  return run_pipeline(x, codec, site, &hooks);
}

float ShmPipelinedReduce::group_max(float local, Site site) {
  if (comm_.size() == 1) return local;
  const uint64_t seq = ws_->table().next_max();
  const int slot = 2 * static_cast<int>(seq % 2);
  uint64_t* mine = ws_->table().header(ws_->rank());
  std::atomic_ref<uint64_t>(mine[kHeaderMaxValue + slot]).store(float_bits(local), std::memory_order_relaxed);
  publish(&mine[kHeaderMaxSeq + slot], seq);
  const std::string site_name = to_string(site);
  const WaitContext ctx{site_name.c_str(), peer_timeout_s_, &world_ranks_};
  float global = local;
  for (int p = 0; p < comm_.size(); ++p) {
    if (p == ws_->rank()) continue;
    uint64_t* theirs = ws_->table().header(p);
    times_.wait_s += wait_for_peer(&theirs[kHeaderMaxSeq + slot], seq, theirs, nullptr, p, "max", ctx);
    const float v = bits_float(static_cast<uint32_t>(
        std::atomic_ref<uint64_t>(theirs[kHeaderMaxValue + slot]).load(std::memory_order_relaxed)));
    global = v > global ? v : global;  // NOTE: callers pass +inf, never NaN, for a non-finite value
  }
  return global;
}

size_t ShmPipelinedReduce::run_pipeline(std::span<float> x, const SegmentCodec& codec, Site site, TileHooks* hooks) {
  const PipelineSchedule& s = schedules_.get(x.size(), codec);
  const std::string site_name = to_string(site);
  const Call call{x,
                  codec,
                  s,
                  ws_->table().reserve_rounds(s.rounds),
                  CallHeader{ws_->table().next_call(), x.size(), codec.bytes(x.size())},
                  WaitContext{site_name.c_str(), peer_timeout_s_, &world_ranks_},
                  hooks};
  write_header(ws_->table().header(ws_->rank()), call.header);
  ++times_.calls;
  if (lanes_.size() == 1) {
    const size_t bad = run_lane(call, lanes_[0]);
    add_lane_times();
    return bad;
  }

  // Lane i on the pool's lane i (0: this thread). The pool returns, or rethrows the error of the
  // lowest lane that threw, only once every lane has finished the call: nothing still uses `call`
  // when we leave, and the lanes' times are complete to add either way.
  std::vector<size_t> bad(lanes_.size(), 0);
  try {
    pool_.run([&](int i) { bad[static_cast<size_t>(i)] = run_lane(call, lanes_[static_cast<size_t>(i)]); });
  } catch (...) {
    add_lane_times();
    throw;
  }
  add_lane_times();
  size_t total = 0;
  for (size_t b : bad) total += b;
  return total;
}

void ShmPipelinedReduce::add_lane_times() {
  // Thread-seconds: with several lanes the parts add up to more than the call's wall time.
  for (const Lane& lane : lanes_) {
    times_.encode_s += lane.times.encode_s;
    times_.reduce_s += lane.times.reduce_s;
    times_.copy_s += lane.times.copy_s;
    times_.decode_s += lane.times.decode_s;
    times_.wait_s += lane.times.wait_s;
  }
}

size_t ShmPipelinedReduce::run_lane(const Call& call, Lane& lane) {
  const size_t tile = call.schedule.largest_tile;
  if (lane.sum.size() < tile) lane.sum.resize(tile);
  if (call.hooks && lane.staged.size() < tile) lane.staged.resize(tile);
  lane.times = {};
  size_t bad = 0;
  for (int r = 0; r < call.schedule.rounds; ++r) bad += run_round(call, r, lane);
  return bad;
}

const float* ShmPipelinedReduce::tile_values(const Call& call, const Tile& tile, Lane& lane) {
  if (!call.hooks) return call.x.data() + tile.begin;
  call.hooks->load(call.x.data(), tile.begin, tile.size, lane.staged.data());
  return lane.staged.data();
}

size_t ShmPipelinedReduce::run_round(const Call& call, int round, Lane& lane) {
  const P2pGeometry& g = ws_->geometry();
  const PipelineSchedule& s = call.schedule;
  const SegmentCodec& codec = call.codec;
  const int P = g.ranks, me = ws_->rank();
  const int first_slot = lane.index, slot_step = static_cast<int>(lanes_.size());
  const uint64_t base = call.first_base + static_cast<uint64_t>(round) * kStagesPerRound;
  EngineTimes& times = lane.times;

  // Push: every non-owned tile, encoded into its owner's region.
  Stopwatch watch;
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    for (int t = first_slot; t < g.tiles; t += slot_step) {
      const Tile tile = s.tile(j, round, t);
      if (tile.size == 0) break;
      codec.encode(tile_values(call, tile, lane), tile.size, ws_->table().region(j) + g.recv_slot_offset(me, t));
      publish(ws_->table().push_flag(j, t, me), base + kStagePush);
    }
  }
  times.encode_s += watch.lap();

  // Reduce and gather, tile by tile of the own segment, as the peers' copies arrive.
  for (int t = first_slot; t < g.tiles; t += slot_step) {
    const Tile tile = s.tile(me, round, t);
    if (tile.size == 0) break;
    watch.lap();
    codec.load_own(tile_values(call, tile, lane), tile.size, lane.sum.data());
    double waited = 0;
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      waited += wait_for_peer(ws_->table().push_flag(me, t, p), base + kStagePush, ws_->table().header(p), &call.header, p, "push",
                              call.ctx);
      // The peer wrote its header before its first push and cannot start another call before this
      // rank's gather, so its header is this call's: a different length or codec is caught here.
      if (round == 0 && t == 0) check_same_call(ws_->table().header(p), call.header, p, call.ctx);
      codec.decode_add(ws_->table().region(me) + g.recv_slot_offset(p, t), tile.size, lane.sum.data());
    }
    times.wait_s += waited;
    times.reduce_s += watch.lap() - waited;
    uint8_t* own_code = ws_->table().region(me) + g.gather_slot_offset(me, t);
    codec.encode(lane.sum.data(), tile.size, own_code);
    times.encode_s += watch.lap();
    const size_t bytes = codec.bytes(tile.size);
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      std::memcpy(ws_->table().region(p) + g.gather_slot_offset(me, t), own_code, bytes);
      publish(ws_->table().gather_flag(p, t, me), base + kStageGather);
    }
    times.copy_s += watch.lap();
  }

  // Tail: every owner's encoded sum, the own one included, decoded into x.
  size_t bad = 0;
  for (int j = 0; j < P; ++j) {
    for (int t = first_slot; t < g.tiles; t += slot_step) {
      const Tile tile = s.tile(j, round, t);
      if (tile.size == 0) break;
      if (j != me)
        times.wait_s += wait_for_peer(ws_->table().gather_flag(me, t, j), base + kStageGather, ws_->table().header(j), &call.header, j,
                                      "gather", call.ctx);
      watch.lap();
      const uint8_t* code = ws_->table().region(me) + g.gather_slot_offset(j, t);
      if (call.hooks) {
        bad += codec.decode(code, tile.size, lane.staged.data());
        call.hooks->finish(call.x.data(), tile.begin, tile.size, lane.staged.data());
      } else {
        bad += codec.decode(code, tile.size, call.x.data() + tile.begin);
      }
      times.decode_s += watch.lap();
    }
  }
  return bad;
}

}  // namespace echo::comm::p2p
