// Flags and headers in peer memory (docs/design.md §7, "Pipelined peer-to-peer transport"): a
// producer publishes base + stage with release semantics after writing a slot, a consumer polls
// with acquire before reading it. Waiting backs off to sched_yield and short sleeps, because the
// ranks of a CPU node are often oversubscribed, and gives up after a timeout with an error that
// names the site, the stage and the peer, so a lost peer is an error and never a hang.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace echo::comm::p2p {

inline void publish(uint64_t* flag, uint64_t value) {
  std::atomic_ref<uint64_t>(*flag).store(value, std::memory_order_release);
}
inline uint64_t observe(uint64_t* flag) { return std::atomic_ref<uint64_t>(*flag).load(std::memory_order_acquire); }

// What a rank is doing in its current call, in its region's header: a peer checks that both
// called with the same length and codec, so a mismatch is an error and not a wrong sum.
struct CallHeader {
  uint64_t seq = 0;   // the call's number on this communicator, from 1
  uint64_t n = 0;     // elements
  uint64_t wire = 0;  // encoded bytes of the whole tensor (tells the codecs apart)
};
// Seqlock-style: a reader never mixes two calls' words.
void write_header(uint64_t* header, const CallHeader& h);
bool read_header(uint64_t* header, CallHeader& out);

// Where a wait happens, for the timeout message.
struct WaitContext {
  const char* site = "";   // e.g. "forward site 3"
  double timeout_s = 300;  // 0 or less: wait forever
  // The world rank of each rank of the group (Communicator::world_ranks), so that a message names
  // the rank mpirun and the logs know; null: the group's own numbers.
  const std::vector<int>* world_ranks = nullptr;
};

// "rank 3 (rank 1 of the group)", or "rank 1" where the numbers agree or are unknown (null).
std::string peer_name(const std::vector<int>* world_ranks, int peer);
// The tail of a peer timeout's message: what the node's progress board tells of the peer's
// process (stopped, gone, not running), else that it stopped, crashed or made a different call.
std::string peer_timeout_cause(const std::vector<int>* world_ranks, int peer);

// Waits until *flag == expected. `peer_header` is the peer's header, checked against `mine` (unless
// null) while waiting; the wait throws on a length or codec mismatch, on a flag that ran past `expected`
// (the peer is out of step) and on timeout. Returns the seconds spent waiting.
// Throws when the peer's header shows the same call with another length or codec.
void check_same_call(uint64_t* peer_header, const CallHeader& mine, int peer, const WaitContext& ctx);

double wait_for_peer(uint64_t* flag, uint64_t expected, uint64_t* peer_header, const CallHeader* mine, int peer,
                     const char* stage, const WaitContext& ctx);

}  // namespace echo::comm::p2p
