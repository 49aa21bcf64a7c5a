// LanePool alone: lanes run on distinct threads that persist across calls, lane 0 on the caller;
// errors reach the caller only after every lane finished, the lowest lane's first; the pool
// survives them; the destructor joins its workers, also while an exception unwinds; parked
// workers use no CPU; thousands of calls of random work add up exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/lane_pool.h"

namespace echo {
namespace {

TEST(LanePool, LanesRunOnDistinctThreadsThatPersistAcrossCalls) {
  for (int lanes : {1, 2, 3, 5}) {
    LanePool pool(lanes);
    EXPECT_EQ(pool.lanes(), lanes);
    std::vector<std::thread::id> first(static_cast<size_t>(lanes)), later(static_cast<size_t>(lanes));
    pool.run([&](int lane) { first[static_cast<size_t>(lane)] = std::this_thread::get_id(); });
    for (int call = 0; call < 50; ++call)
      pool.run([&](int lane) { later[static_cast<size_t>(lane)] = std::this_thread::get_id(); });
    EXPECT_EQ(first[0], std::this_thread::get_id()) << "lane 0 is the caller's thread";
    EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), static_cast<size_t>(lanes));
    EXPECT_EQ(first, later) << "the same workers serve every call, none started per call";
  }
}

TEST(LanePool, ThousandsOfCallsOfRandomWorkAddUpExactly) {
  LanePool pool(3);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> got(3), want(3, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int call = 0; call < 20000; ++call) {
    const std::vector<uint64_t> add = {rng() % 1000, rng() % 1000, rng() % 1000};
    for (size_t i = 0; i < 3; ++i) want[i] += add[i] * (i + 1);
    pool.run([&](int lane) {
      const auto i = static_cast<size_t>(lane);
      for (uint64_t k = 0; k <= i; ++k) got[i] += add[i];  // plain writes: run() must publish them
    });
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(got, want);
  EXPECT_LT(seconds, 60.0) << "20000 hand-overs should take well under a second, even oversubscribed";
}

TEST(LanePool, TheLowestThrowingLanesErrorArrivesAfterEveryLaneFinished) {
  LanePool pool(4);
  std::atomic<int> finished{0};
  try {
    pool.run([&](int lane) {
      if (lane == 0) ECHO_FAIL("lane 0 failed at once");
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * lane));
      finished.fetch_add(1);
      if (lane >= 2) throw std::runtime_error("lane " + std::to_string(lane));
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lane 0 failed at once"), std::string::npos) << e.what();
    EXPECT_EQ(finished.load(), 3) << "run() returned while workers still ran";
  }

  // Workers only: the lowest of them wins, whichever threw first in time.
  try {
    pool.run([&](int lane) {
      if (lane == 3) throw std::runtime_error("lane 3");
      if (lane == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        throw std::runtime_error("lane 1");
      }
    });
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "lane 1");
  }

  // The pool is fine afterwards, and an old error does not come back.
  std::vector<int> ran(4, 0);
  pool.run([&](int lane) { ran[static_cast<size_t>(lane)] = 1; });
  EXPECT_EQ(ran, std::vector<int>(4, 1));
}

// Counts the worker threads that have exited: a thread_local's destructor runs as its thread
// ends, before join() returns. It ends slowly, so that a pool that did not join would be seen.
std::atomic<int> exited{0};
struct ExitCounter {
  bool armed = false;
  ~ExitCounter() {
    if (!armed) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    exited.fetch_add(1);
  }
};
thread_local ExitCounter exit_counter;

TEST(LanePool, TheDestructorJoinsTheWorkersAlsoWhileAnExceptionUnwinds) {
  exited = 0;
  {
    LanePool pool(4);
    pool.run([](int lane) { exit_counter.armed = lane != 0; });
  }
  EXPECT_EQ(exited.load(), 3) << "every worker ended before the destructor returned";

  exited = 0;
  try {
    LanePool pool(3);
    pool.run([](int lane) {
      exit_counter.armed = lane != 0;
      if (lane == 2) throw std::runtime_error("unwind");
    });
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "unwind");
    EXPECT_EQ(exited.load(), 2) << "the pool destroyed by the unwinding joined its workers";
  }
}

TEST(LanePool, ParkedWorkersUseNoCpu) {
  LanePool pool(4);
  pool.run([](int) {});
  const std::clock_t before = std::clock();  // CPU time of the whole process, all threads
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu_s = static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_s, 0.05) << "three parked workers spun for " << cpu_s << " s of CPU in 0.3 s";
}

TEST(LanePool, RunFromInsideATaskIsAnErrorNotADeadlock) {
  LanePool pool(2);
  try {
    pool.run([&](int lane) {
      if (lane == 1) pool.run([](int) {});
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in flight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LanePool(0), Error);
}

}  // namespace
}  // namespace echo
