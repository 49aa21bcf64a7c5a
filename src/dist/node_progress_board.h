// Where each rank on this node is, for the collective watchdog's message (docs/design.md §3,
// "Stuck peers"). A rank waiting in a collective cannot tell which peer holds it up: MPI says
// nothing about who has not arrived. The ranks of one node share a page of memory in which each
// rank's watchdog shows what it is doing (in which collective since when, or outside any since
// when) and that its process still runs (a heartbeat from the watchdog thread); with the state
// /proc gives each peer's process (stopped, gone), a timeout's message then names the rank that
// stalled instead of "a peer". Ranks on other nodes cannot be seen; the message says so.
//
// The memory is a memfd the node's first rank makes and the others open through /proc (no name in
// /dev/shm, so nothing is left behind whatever happens), never unmapped: the detached watchdog
// thread may read it while the process exits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace echo::dist {

class Communicator;
struct ProgressSlot;

class NodeProgressBoard {
 public:
  // Collective over `comm`. Null on every rank when shared memory could not be had on some rank
  // of the job (the message then says "a peer rank"); `why` gets the reason there.
  static NodeProgressBoard* create(const Communicator& comm, std::string* why);

  // This rank's slot, written by the thread that enters collectives: it entered `what` (a
  // string literal) on the communicator `members` (Communicator::members_id; 0: unknown) during
  // training step `step` (0: none), or left every collective.
  void enter(const char* what, int64_t step, uint64_t members, int64_t now_ns);
  void leave(int64_t now_ns);
  // The watchdog thread's heartbeat at each look, with its interval between looks.
  void beat(int64_t now_ns, int64_t poll_ns);

  // What the other ranks on this node are doing, for the message of collective `what` at `step`
  // on communicator `members` that has made no progress for `waited_ns`: the ranks that hold it
  // up (gone, stopped, not running, outside any watched collective for at least half that time);
  // else who waits in the same collective, who in another on the same communicator (a deadlock),
  // who on other communicators, and whether the stalled rank is on another node.
  std::string describe_others(int64_t now_ns, int64_t waited_ns, const char* what, int64_t step,
                              uint64_t members) const;
  // "rank r (pid p) is stopped (...)" when world rank `world_rank` runs on this node and its
  // process is gone, stopped or not running; "" otherwise (running, or not on this node).
  std::string describe_process(int world_rank, int64_t now_ns) const;

 private:
  NodeProgressBoard(ProgressSlot* slots, int local_size, int local_rank, int world_size);
  // Slot i's process gone, stopped or not running, in words after "rank r (pid p)"; "" if it runs.
  std::string process_problem(int i, int64_t now_ns) const;
  ProgressSlot* slots_;
  std::vector<bool> visible_;  // slot i's process showed in this rank's /proc at start-up
  int local_size_;
  int local_rank_;
  int world_size_;
};

// A process on this machine as /proc/<pid>/stat shows it: its state letter ('R', 'S', 'D', 'T',
// 't', 'Z', ...; 0 when there is no such process) and its start time (clock ticks after boot),
// which tells a process from a later one that got the same number. read_error is the errno of a
// read that failed for a reason other than "no such process" (EMFILE, EACCES): then state is 0
// but the process may well be there.
struct ProcessStat {
  char state = 0;
  uint64_t start_ticks = 0;
  int read_error = 0;
};
ProcessStat process_stat(int pid);

}  // namespace echo::dist
