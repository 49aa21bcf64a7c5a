// Tells a process that was stopped (SIGSTOP, Ctrl-Z, a debugger) from one starved of a CPU.
//
// Two waits excuse the time their own process did not run, so that a rank stopped inside a
// collective and then continued does not blame the peers it kept waiting: the collective
// watchdog's thread (dist/collective_watchdog.cpp) and the shm transport's flag wait
// (comm/p2p/peer_flags.cpp). Both see only that a look came far later than asked. A thread that
// was stopped was neither running nor waiting for a CPU in that time; a starved one was waiting
// (runnable) all along, and its wait is real: the peers' time passed. The kernel keeps both sums
// per thread in /proc/thread-self/schedstat (time on a CPU, time runnable on a run queue; see the
// kernel's Documentation/scheduler/sched-stats.rst), so the gap less their growth is the time the
// thread was stopped (or asleep). NOTE: a virtual machine's steal time (the host ran another
// guest) is in neither sum, so it still counts as a stop, as every late look did before this
// clock. docs/design.md §3 "Who holds it up".
#pragma once

#include <cstdint>

namespace echo {

class RunnableClock {
 public:
  // Opens the calling thread's schedstat: use the clock on the thread that made it.
  RunnableClock();
  ~RunnableClock();
  RunnableClock(const RunnableClock&) = delete;
  RunnableClock& operator=(const RunnableClock&) = delete;

  // Nanoseconds the thread has been on a CPU or runnable since it began; -1 where the kernel does
  // not say (no /proc, a kernel without CONFIG_SCHED_INFO).
  int64_t read() const;

 private:
  int fd_ = -1;
};

// The clock's growth between two reads; -1 if either was unknown.
inline int64_t runnable_growth(int64_t before, int64_t after) {
  return before >= 0 && after >= 0 ? after - before : -1;
}

// Of a gap of gap_ns between two looks, of which the thread meant to sleep asleep_ns, the part it
// was neither asleep, running nor runnable: stopped. runnable_ns is the clock's growth over the
// gap; negative (unknown) excuses the whole gap past the sleep, as a stop would.
inline int64_t stopped_part_ns(int64_t gap_ns, int64_t asleep_ns, int64_t runnable_ns) {
  int64_t stopped = gap_ns - asleep_ns;
  if (runnable_ns >= 0) stopped -= runnable_ns;
  return stopped > 0 ? stopped : 0;
}

}  // namespace echo
