// Polling peer flags with backoff and a timeout.
#include "comm/p2p/peer_flags.h"

#include <sched.h>

#include <chrono>
#include <thread>

#include "comm/p2p/p2p_geometry.h"
#include "core/error.h"
#include "core/runnable_clock.h"
#include "core/seconds_text.h"
#include "dist/collective_watchdog.h"

namespace echo::comm::p2p {

void write_header(uint64_t* header, const CallHeader& h) {
  std::atomic_ref<uint64_t> seq(header[kHeaderSeq]);
  seq.store(0, std::memory_order_relaxed);  // "being written": never a valid call number
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint64_t>(header[kHeaderN]).store(h.n, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(header[kHeaderWire]).store(h.wire, std::memory_order_relaxed);
  seq.store(h.seq, std::memory_order_release);
}

bool read_header(uint64_t* header, CallHeader& out) {
  std::atomic_ref<uint64_t> seq(header[kHeaderSeq]);
  const uint64_t s1 = seq.load(std::memory_order_acquire);
  out.n = std::atomic_ref<uint64_t>(header[kHeaderN]).load(std::memory_order_relaxed);
  out.wire = std::atomic_ref<uint64_t>(header[kHeaderWire]).load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t s2 = seq.load(std::memory_order_relaxed);
  out.seq = s1;
  return s1 != 0 && s1 == s2;
}

namespace {
bool known(const std::vector<int>* world_ranks, int peer) {
  return world_ranks != nullptr && peer >= 0 && static_cast<size_t>(peer) < world_ranks->size();
}
}  // namespace

std::string peer_name(const std::vector<int>* world_ranks, int peer) {
  if (!known(world_ranks, peer) || (*world_ranks)[static_cast<size_t>(peer)] == peer)
    return fmt::format("rank {}", peer);
  return fmt::format("rank {} (rank {} of the group)", (*world_ranks)[static_cast<size_t>(peer)], peer);
}

std::string peer_timeout_cause(const std::vector<int>* world_ranks, int peer) {
  const std::string state =
      known(world_ranks, peer) ? dist::describe_peer_process((*world_ranks)[static_cast<size_t>(peer)]) : "";
  return state.empty() ? "that rank stopped, crashed or made a different call" : state;
}

void check_same_call(uint64_t* peer_header, const CallHeader& mine, int peer, const WaitContext& ctx) {
  CallHeader theirs;
  if (!read_header(peer_header, theirs) || theirs.seq != mine.seq) return;
  ECHO_CHECK(theirs.n == mine.n && theirs.wire == mine.wire,
             "shm all-reduce at {}: {} called with {} elements ({} encoded bytes), this rank with {} ({} bytes): "
             "every rank of the group must reduce a tensor of the same length with the same codec",
             ctx.site, peer_name(ctx.world_ranks, peer), theirs.n, theirs.wire, mine.n, mine.wire);
}

double wait_for_peer(uint64_t* flag, uint64_t expected, uint64_t* peer_header, const CallHeader* mine, int peer,
                     const char* stage, const WaitContext& ctx) {
  uint64_t value = observe(flag);
  if (value == expected) return 0.0;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_look = start;
  // Seconds this process did not run (stopped, then continued): not a wait for the peer.
  double not_running = 0;
  thread_local const RunnableClock runnable;  // this thread's (opened once per thread)
  int64_t last_runnable = -1;                 // unknown until the first look
  int64_t asked_sleep_ns = 0;                 // the sleeps asked for since the last look
  bool long_wait = false;                     // past 100 ms: the peer is far behind (or stopped)
  for (uint64_t polls = 1;; ++polls) {
    value = observe(flag);
    if (value == expected) break;
    ECHO_CHECK(value < expected,
               "shm all-reduce at {}: {} is out of step in the {} stage (flag {} where {} was expected): the "
               "ranks of the group made different sequences of calls",
               ctx.site, peer_name(ctx.world_ranks, peer), stage, value, expected);
    if (polls % 64 == 0) {
      if (mine) check_same_call(peer_header, *mine, peer, ctx);
      const auto now = clock::now();
      // 64 polls take milliseconds (yields, or at most 64 sleeps of 1 ms); a gap of over a second
      // between two looks is time this process was stopped (SIGSTOP, Ctrl-Z; mpirun's abort
      // continues it), which must not make it blame the peer it kept waiting, or time it was
      // starved of a CPU, which is a real wait: the thread's runnable clock tells them apart
      // (core/runnable_clock.h). Read from the first look on: one read per 64 polls, none on the
      // many short waits; a stop before the first look is excused whole, as without the clock.
      const int64_t runnable_now = runnable.read();
      const double gap = std::chrono::duration<double>(now - last_look).count();
      if (gap > 1.0)
        not_running += 1e-9 * static_cast<double>(stopped_part_ns(static_cast<int64_t>(gap * 1e9), asked_sleep_ns,
                                                                  runnable_growth(last_runnable, runnable_now)));
      last_look = now;
      last_runnable = runnable_now;
      asked_sleep_ns = 0;
      const double waited = std::chrono::duration<double>(now - start).count() - not_running;
      // A stopped or lost peer is the run's fault, not echo's: a run error, no "[at file:line]".
      if (ctx.timeout_s > 0 && waited >= ctx.timeout_s) {
        ECHO_RUN_FAIL(
            "shm all-reduce at {}: timed out after {} s in the {} stage waiting for {} "
            "(comm.peer_timeout_s = {}); {}",
            ctx.site, seconds_text(waited), stage, peer_name(ctx.world_ranks, peer), ctx.timeout_s,
            peer_timeout_cause(ctx.world_ranks, peer));
      }
      long_wait = waited > 0.1;
    }
    // NOTE: oversubscribed ranks (more ranks than cores, as in CI) need the core the waiter holds:
    // yield at once, and sleep once the wait is long. Past 100 ms, 1 ms sleeps (at most 1% more
    // wait): with 20 µs sleeps a stopped peer cost ~17% of a core until peer_timeout_s.
    if (polls < 4096) {
      sched_yield();
    } else {
      const int64_t sleep_us = long_wait ? 1000 : 20;
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      asked_sleep_ns += sleep_us * 1000;  // asleep, not stopped (stopped_part_ns)
    }
  }
  return std::chrono::duration<double>(clock::now() - start).count();
}

}  // namespace echo::comm::p2p
