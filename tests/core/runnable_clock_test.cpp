// core/runnable_clock.h: the runnable clock grows while a thread runs or waits for a CPU and not
// while it sleeps or is stopped, so a late look's delay splits into starvation (a real wait) and
// a stop (excused by the collective watchdog and the shm flag wait).
#include "core/runnable_clock.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/stopwatch.h"

namespace echo {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(StoppedPart, HandWorkedGaps) {
  // A look 1.5 s after the last, 0.1 s of it asked-for sleep: runnable for 0.05 s -> stopped 1.35 s.
  EXPECT_EQ(stopped_part_ns(1500 * kMs, 100 * kMs, 50 * kMs), 1350 * kMs);
  // Runnable for 1.4 s of it: starved of a CPU, not stopped.
  EXPECT_EQ(stopped_part_ns(1500 * kMs, 100 * kMs, 1400 * kMs), 0);
  // More runnable than the gap past the sleep (it ran on the way in and out): never negative.
  EXPECT_EQ(stopped_part_ns(1500 * kMs, 100 * kMs, 1450 * kMs), 0);
  // The kernel does not say: the whole delay past the sleep counts as a stop, as before the clock.
  EXPECT_EQ(stopped_part_ns(1500 * kMs, 100 * kMs, -1), 1400 * kMs);
  EXPECT_EQ(stopped_part_ns(50 * kMs, 100 * kMs, -1), 0);
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
}

int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return 0;
}

// Two spinning threads on one CPU: each runs about half the time and waits for the CPU the other
// half. Waiting counts: the clock grows by about the wall time, not by the thread's CPU time.
TEST(RunnableClock, WaitingForACpuCounts) {
  const int cpu = first_allowed_cpu();
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    pin_to(cpu);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  int64_t wall = 0, grew = 0, on_cpu = 0;
  std::thread measured([&] {
    pin_to(cpu);
    const RunnableClock clock;
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    const int64_t r0 = clock.read(), t0 = steady_now_ns();
    while (steady_now_ns() - t0 < 400 * kMs) {
    }
    const int64_t r1 = clock.read();
    wall = steady_now_ns() - t0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    ASSERT_GE(r0, 0) << "no /proc/thread-self/schedstat (kernel without CONFIG_SCHED_INFO?)";
    grew = r1 - r0;
    on_cpu = (cpu1.tv_sec - cpu0.tv_sec) * 1'000'000'000 + (cpu1.tv_nsec - cpu0.tv_nsec);
  });
  measured.join();
  stop = true;
  hog.join();
  EXPECT_GE(grew, wall * 9 / 10) << "wall " << wall << " ns, on a CPU " << on_cpu << " ns";
  EXPECT_LE(grew, wall + 10 * kMs);
  // The CPU was shared: the clock counted time the thread did not run.
  EXPECT_LT(on_cpu, wall * 8 / 10) << "the hog did not share the CPU (wall " << wall << " ns)";
}

TEST(RunnableClock, SleepDoesNotCount) {
  const RunnableClock clock;
  const int64_t r0 = clock.read();
  ASSERT_GE(r0, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(clock.read() - r0, 50 * kMs);
}

// The process stopped (SIGSTOP from a child, continued 0.5 s later) while the thread was in a
// short sleep: the look is late by the stop, and the clock says it was not runnable then.
TEST(RunnableClock, AStopIsTheLateLookLessTheClock) {
  const RunnableClock clock;
  const int64_t r0 = clock.read(), t0 = steady_now_ns();
  const pid_t me = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    kill(me, SIGSTOP);
    usleep(500'000);
    kill(me, SIGCONT);
    _exit(0);
  }
  // The sleep is cut short or stretched by the stop; wait until the child has continued us.
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t gap = steady_now_ns() - t0, grew = clock.read() - r0;
  EXPECT_GE(gap, 500 * kMs);
  EXPECT_GE(stopped_part_ns(gap, 20 * kMs, grew), 400 * kMs) << "gap " << gap << " ns, runnable " << grew << " ns";
}

}  // namespace
}  // namespace echo
