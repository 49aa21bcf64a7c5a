// The collective watchdog (dist/collective_watchdog.h), in one process with a recording handler:
// a scope that outlasts the timeout is reported once, naming it, soon after (the thread looks
// every quarter timeout; the bound here leaves room for a loaded CI machine); many short scopes
// whose total is far beyond the timeout are not; a nested scope re-arms its outer one when it
// ends; a timeout of 0 watches nothing; a slow scope (start-up, saves) is timed against the slow
// limit (comm.save_timeout_s), not the step's, and a step scope nested in it restores it when it ends. The short scopes are 1/100 of the timeout, so only a
// stall of the test thread far beyond any scheduler's could make them look like an overrun.
#include "dist/collective_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace echo::dist {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kNone = CollectiveScope::kUnknownMembers;  // one process, no communicator

class CollectiveWatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_collective_timeout_handler([this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex_);
      messages_.push_back(m);
    });
  }
  void TearDown() override {
    set_collective_timeout(0, 0);
    set_slow_collective_timeout(0);
    std::this_thread::sleep_for(50ms);  // the thread's current look ends before the handler goes
    set_collective_timeout_handler(nullptr);
    set_collective_step(0);
  }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  std::mutex mutex_;
  std::vector<std::string> messages_;
};

TEST_F(CollectiveWatchdogTest, AScopeThatOutlastsTheTimeoutIsReportedOnceNamingIt) {
  set_collective_timeout(0.2, 3);
  const auto start = std::chrono::steady_clock::now();
  {
    const CollectiveScope scope("the probe collective", kNone);
    while (messages().empty() && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
    const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(after, 0.2);
    EXPECT_LT(after, 1.5);  // 1.25 timeouts, plus scheduling slack
    std::this_thread::sleep_for(300ms);  // several more looks: still one report for this scope
  }
  const auto got = messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rfind("[rank 3] error: no progress for ", 0), 0u) << got[0];
  EXPECT_NE(got[0].find(" s in the probe collective (comm.peer_timeout_s = 0.2): a peer rank is stopped, hung or gone"),
            std::string::npos)
      << got[0];
}

// The step the trainer published is named (a hang in step 12 of a long run says so), and a step
// of 0 (start-up) names none.
TEST_F(CollectiveWatchdogTest, TheMessageNamesTheStepTheLoopIsIn) {
  set_collective_timeout(0.05, 1);
  for (const int64_t step : {int64_t{12}, int64_t{0}}) {
    set_collective_step(step);
    const size_t before = messages().size();
    const auto start = std::chrono::steady_clock::now();
    {
      const CollectiveScope scope("the probe collective", kNone);
      while (messages().size() == before && std::chrono::steady_clock::now() - start < 5s)
        std::this_thread::sleep_for(2ms);
    }
    const auto got = messages();
    ASSERT_EQ(got.size(), before + 1);
    const bool named = got.back().find(" s in the probe collective at step 12 (comm.peer_timeout_s = 0.05)") !=
                       std::string::npos;
    EXPECT_EQ(named, step == 12) << got.back();
    if (step == 0) {
      EXPECT_NE(got.back().find(" s in the probe collective (comm.peer_timeout_s = 0.05)"), std::string::npos)
          << got.back();
    }
  }
}

// A sub-second timeout (comm.peer_timeout_s = 0.001 is valid) is reported with the time it
// waited, not rounded to "0 s".
TEST_F(CollectiveWatchdogTest, ASubSecondWaitIsReportedInSignificantDigits) {
  set_collective_timeout(0.001, 0);
  const auto start = std::chrono::steady_clock::now();
  {
    const CollectiveScope scope("the probe collective", kNone);
    while (messages().empty() && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(1ms);
  }
  const auto got = messages();
  ASSERT_EQ(got.size(), 1u);
  const std::string prefix = "[rank 0] error: no progress for ";
  ASSERT_EQ(got[0].rfind(prefix, 0), 0u) << got[0];
  // The wait itself depends on when the thread looks (its previous sleep may be long, and a wait of
  // 2.00 s prints "2"): whatever it is, it is not rounded down to "0" (seconds_text_test checks
  // the digits themselves).
  const std::string seconds = got[0].substr(prefix.size(), got[0].find(' ', prefix.size()) - prefix.size());
  EXPECT_GE(std::stod(seconds), 0.001) << got[0];
  EXPECT_NE(got[0].find(" s in the probe collective (comm.peer_timeout_s = 0.001)"), std::string::npos) << got[0];
}

TEST_F(CollectiveWatchdogTest, ManyShortScopesAreNotAnOverrun) {
  set_collective_timeout(0.5, 0);
  for (int i = 0; i < 300; ++i) {  // 1.5 s in all, 3 timeouts, none of them in one scope
    const CollectiveScope scope("a short collective", kNone);
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(1s);  // and time outside any scope is never an overrun
  EXPECT_TRUE(messages().empty()) << messages().front();
}

TEST_F(CollectiveWatchdogTest, AnInnerScopeReArmsItsOuterOneWhenItEnds) {
  set_collective_timeout(0.5, 1);
  const CollectiveScope outer("the outer collective", kNone);
  for (int i = 0; i < 60; ++i) {  // 1.2 s inside the outer scope, but never 0.5 s without a change
    const CollectiveScope inner("the inner collective", kNone);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(messages().empty());
  const auto start = std::chrono::steady_clock::now();
  while (messages().empty() && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  const auto got = messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find(" in the outer collective "), std::string::npos) << got[0];
}

// Waits up to 5 s for the count of messages to reach n; returns the seconds since start.
template <class Messages>
double wait_for_messages(Messages&& messages, size_t n, std::chrono::steady_clock::time_point start) {
  while (messages().size() < n && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(CollectiveWatchdogTest, ASlowScopeIsTimedAgainstTheSlowLimit) {
  set_collective_timeout(0.2, 2);
  set_slow_collective_timeout(1.0);
  const auto start = std::chrono::steady_clock::now();
  {
    const CollectiveScope scope("the probe save", kNone, Patience::slow);
    std::this_thread::sleep_for(600ms);  // 3 step limits: not an overrun of a slow scope
    EXPECT_TRUE(messages().empty()) << messages().front();
    const double after = wait_for_messages([this] { return messages(); }, 1, start);
    EXPECT_GE(after, 1.0);
    EXPECT_LT(after, 2.5);  // 1.25 slow limits (looks every quarter of the smaller limit), plus slack
  }
  const auto got = messages();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rfind("[rank 2] error: no progress for ", 0), 0u) << got[0];
  EXPECT_NE(got[0].find(" s in the probe save (comm.save_timeout_s = 1): a peer rank is stopped, hung or gone"),
            std::string::npos)
      << got[0];
}

TEST_F(CollectiveWatchdogTest, AStepScopeInASlowOneUsesTheStepLimitAndRestoresTheSlowOne) {
  set_collective_timeout(0.2, 0);
  set_slow_collective_timeout(1.0);
  // Off (between tests) the thread sleeps 0.1 s between looks: let that sleep end, so the step
  // limit below is told from the slow one. Time outside any scope is never an overrun.
  std::this_thread::sleep_for(300ms);
  const CollectiveScope outer("the outer save", kNone, Patience::slow);
  {
    const CollectiveScope inner("the inner step collective", kNone);
    const double after = wait_for_messages([this] { return messages(); }, 1, std::chrono::steady_clock::now());
    EXPECT_LT(after, 0.9);  // the step limit, not the slow one
  }
  ASSERT_EQ(messages().size(), 1u);
  EXPECT_NE(messages()[0].find(" in the inner step collective (comm.peer_timeout_s = 0.2)"), std::string::npos)
      << messages()[0];
  const auto back = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(600ms);  // the outer scope again, against the slow limit
  EXPECT_EQ(messages().size(), 1u) << messages().back();
  const double after = wait_for_messages([this] { return messages(); }, 2, back);
  EXPECT_GE(after, 1.0);
  const auto got = messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[1].find(" in the outer save (comm.save_timeout_s = 1)"), std::string::npos) << got[1];
}

TEST_F(CollectiveWatchdogTest, ASlowLimitOfZeroLeavesSlowScopesUnwatched) {
  set_collective_timeout(0.05, 0);
  {
    const CollectiveScope scope("an unwatched save", kNone, Patience::slow);
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_TRUE(messages().empty()) << messages().front();
}

TEST_F(CollectiveWatchdogTest, ATimeoutOfZeroWatchesNothing) {
  set_collective_timeout(0.05, 0);
  set_collective_timeout(0, 0);
  {
    const CollectiveScope scope("an unwatched collective", kNone);
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_TRUE(messages().empty());
}

}  // namespace
}  // namespace echo::dist
