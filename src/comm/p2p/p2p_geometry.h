// Where everything lives in the peer-to-peer workspace of the pipelined all-reduce
// (docs/design.md §7, "Pipelined peer-to-peer transport"; Echo paper Sec. 4.2 and Appendix C).
// Every rank of a TP group owns one region of the same size; the shm transport maps the peers'
// regions through an MPI shared window, the cuda_ipc transport through CUDA IPC handles, and
// both index them with this header, so the byte layout is one definition for both.
//
// Region of one rank (offsets in bytes, 64-byte aligned):
//   header        kHeaderBytes         the rank's current call (seq, n, wire bytes), a probe word, and
//                                      its contribution to the last two group maxima (seq, value)
//   push flags    [tiles][ranks] u64   flag (t, s): sender s wrote tile t of this rank's segment
//   gather flags  [tiles][ranks] u64   flag (t, o): owner o wrote tile t of its encoded sum here
//   recv slots    [ranks][tiles] slot  sender s's encoded copy of tile t of this rank's segment
//   gather slots  [ranks][tiles] slot  owner o's encoded sum, tile t
// The layout depends on the group size and the geometry only, never on a call's shape, so
// back-to-back calls of different shapes use the same flags; a call longer than `tiles` tiles
// per segment runs in rounds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/hd.h"

namespace echo::comm::p2p {

// The header words of a region.
enum HeaderWord : int {
  kHeaderSeq = 0,
  kHeaderN = 1,
  kHeaderWire = 2,
  kHeaderProbe = 3,
  kHeaderMaxSeq = 4,  // + 2 * (max number % 2): two slots, so a rank may start the next max
  kHeaderMaxValue = 5,  // while a slower peer still reads this one
};
constexpr size_t kHeaderBytes = 64;

// A call's flags hold base + stage; the host raises base by kStagesPerRound for every round, so
// a flag is never cleared and a stale value can never equal an expected one.
enum Stage : uint64_t { kStagePush = 1, kStageReduce = 2, kStageGather = 3 };
constexpr uint64_t kStagesPerRound = 3;

struct P2pGeometry {
  int ranks = 1;
  int tiles = 16;                 // tiles per segment in one round
  size_t slot_bytes = 128 << 10;  // one encoded tile, any codec

  ECHO_HD static size_t align64(size_t b) { return (b + 63) / 64 * 64; }
  ECHO_HD size_t flag_count() const { return static_cast<size_t>(tiles) * static_cast<size_t>(ranks); }
  ECHO_HD size_t push_flags_offset() const { return kHeaderBytes; }
  ECHO_HD size_t gather_flags_offset() const { return push_flags_offset() + 8 * flag_count(); }
  ECHO_HD size_t recv_slots_offset() const { return align64(gather_flags_offset() + 8 * flag_count()); }
  ECHO_HD size_t gather_slots_offset() const { return recv_slots_offset() + flag_count() * slot_bytes; }
  ECHO_HD size_t region_bytes() const { return gather_slots_offset() + flag_count() * slot_bytes; }

  // Index of flag (tile slot t, peer p) in either flag array.
  ECHO_HD size_t flag_index(int tile_slot, int peer) const {
    return static_cast<size_t>(tile_slot) * static_cast<size_t>(ranks) + static_cast<size_t>(peer);
  }
  // Offset of slot (peer p, tile slot t) in the recv or gather slots.
  ECHO_HD size_t recv_slot_offset(int sender, int tile_slot) const {
    return recv_slots_offset() + (static_cast<size_t>(sender) * tiles + tile_slot) * slot_bytes;
  }
  ECHO_HD size_t gather_slot_offset(int owner, int tile_slot) const {
    return gather_slots_offset() + (static_cast<size_t>(owner) * tiles + tile_slot) * slot_bytes;
  }
};

}  // namespace echo::comm::p2p
