// CUDA side of the peer flags of the pipelined all-reduce (docs/design.md §7, "Pipelined
// peer-to-peer transport"; the host side is src/comm/p2p/peer_flags.h): tiny kernels that publish
// a flag with a system-scope release, write a call header, and wait for flags with system-scope
// acquire loads. The flags live in the regions of p2p_geometry.h, mapped into this process by CUDA
// IPC, so a peer on this GPU or another one sees them.
//
// A wait never hangs: it gives up after a timeout (%globaltimer), or at once when a peer's flag ran
// past the expected value or the peer's header shows the same call with another length or codec,
// and records the first fault in a device record that the host reads once per call
// (P2pFaultRecord). A wait that finds a fault already recorded returns at once, so one lost peer
// costs one timeout per call, not one per tile. Plain C++ can include this header (no CUDA syntax).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace echo::cuda {

constexpr int kMaxP2pPeers = 8;  // the largest TP group the cuda_ipc transport serves

struct P2pCallHeader {
  uint64_t seq = 0;   // the call's number on the group, from 1
  uint64_t n = 0;     // elements
  uint64_t wire = 0;  // encoded bytes of the whole tensor (tells the codecs apart)
};

// Up to kMaxP2pPeers flags, passed by value to one launch.
struct P2pFlagList {
  int count = 0;
  uint64_t* flag[kMaxP2pPeers] = {};
  // For waits: the peer each flag belongs to, and that peer's region header (checked for a
  // mismatched call while waiting; null: not checked).
  int peer[kMaxP2pPeers] = {};
  uint64_t* peer_header[kMaxP2pPeers] = {};
};

enum P2pFault : uint32_t { kP2pNoFault = 0, kP2pTimeout = 1, kP2pOutOfStep = 2, kP2pMismatch = 3 };

// The stage a fault record names for a wait of p2p_group_max_bits: not a flag stage of a round
// (p2p::Stage is 1..3), only a label.
constexpr int kP2pStageGroupMax = 0;

// The first fault of a call (device memory; fault == kP2pNoFault: none).
struct P2pFaultRecord {
  uint32_t fault;
  int32_t stage;  // p2p::Stage of the wait
  int32_t peer;
  int32_t tile;   // tile slot
  uint64_t observed;  // the flag's value (out of step), or the peer's n (mismatch)
  uint64_t expected;  // the expected flag value, or the peer's wire bytes (mismatch)
  uint64_t waited_ns;
};

// Writes this rank's call header (seqlock order: seq = 0, n and wire, then seq) into `header`.
void p2p_write_header(uint64_t* header, P2pCallHeader h, cudaStream_t stream);
// After everything earlier on the stream: every flag of the list = value, with release at system
// scope; once *record holds a fault, kP2pPoison instead, so that the peers fail as out of step
// rather than take this rank's slots, which a failed wait left unfilled.
constexpr uint64_t kP2pPoison = ~uint64_t{0};
void p2p_publish(const P2pFlagList& flags, uint64_t value, const P2pFaultRecord* record, cudaStream_t stream);
// Holds the stream until every flag of the list equals `expected` (acquire at system scope), or
// records a fault: a flag above `expected` (out of step), a peer header with seq == mine.seq but
// another n or wire (mismatch), or timeout_ns passed (0: no timeout).
void p2p_wait(const P2pFlagList& flags, uint64_t expected, P2pCallHeader mine, int stage, int tile,
              uint64_t timeout_ns, P2pFaultRecord* record, cudaStream_t stream);
// The backward rescale's one scalar, reduced through the headers without the host
// (docs/design.md §7, "The rescale's max"): writes *bits (the bits of this rank's max |x'|, a
// non-negative float or +inf) into `my_header`'s max slot number `max_seq` (two slots used in
// turn, as the shm transport's group_max), publishes max_seq with release at system scope, waits
// for the same max number in every peer header of `peers` (peer and peer_header per peer, the
// flags unused), and leaves the largest bits in *bits: for non-negative floats the integer order
// is the value order. A wait faults as p2p_wait does, with stage kP2pStageGroupMax: timeout; a
// peer's max number past max_seq, or its call number past mine.seq, is out of step; its header of
// this call with another n or wire is a mismatch. After a fault *bits is 0.
void p2p_group_max_bits(uint64_t* my_header, const P2pFlagList& peers, P2pCallHeader mine, uint64_t max_seq,
                        uint32_t* bits, uint64_t timeout_ns, P2pFaultRecord* record, cudaStream_t stream);

}  // namespace echo::cuda
