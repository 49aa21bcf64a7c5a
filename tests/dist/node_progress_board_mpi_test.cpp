// The node's progress board (dist/node_progress_board.h) in the collective watchdog's message, at
// 2 and 4 ranks on one node, with recording handlers instead of ending the process: a rank that
// stays outside any collective is named with its pid; a rank stopped with SIGSTOP is named as
// stopped, and once continued it does not blame the peers it kept waiting (the time it did not
// run is not a wait); ranks waiting in different collectives are a deadlock, in the same one a
// stuck MPI (nobody is missing on a one-node job); a board one rank cannot make is made by none.
// Also /proc's view of a stopped, an exited and a reaped child.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/collective_watchdog.h"
#include "dist/communicator.h"
#include "dist/node_progress_board.h"

namespace echo::dist {
namespace {

using namespace std::chrono_literals;

class NodeProgressBoardTest : public ::testing::Test {
 public:  // wait_until_all_reported below sets the handler and reads the messages
  void SetUp() override {
    world_ = Communicator::borrow(MPI_COMM_WORLD);
    watch_peers_on_node();
    pids_.resize(static_cast<size_t>(world_.size()));
    const int mine = static_cast<int>(getpid());
    MPI_Allgather(&mine, 1, MPI_INT, pids_.data(), 1, MPI_INT, MPI_COMM_WORLD);
    set_collective_timeout_handler([this](const std::string& m) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        messages_.push_back(m);
      }
      if (on_message_) on_message_();
    });
  }
  void TearDown() override {
    set_collective_timeout(0, 0);
    std::this_thread::sleep_for(50ms);  // the thread's current look ends before the handler goes
    set_collective_timeout_handler(nullptr);
    world_.barrier();
  }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  // Rank 0's message names rank 1 with `what`; no other rank's message names another culprit.
  std::string rank1(const std::string& what) const { return "rank 1 (pid " + std::to_string(pids_[1]) + ") " + what; }

  Communicator world_;
  std::vector<int> pids_;
  std::mutex mutex_;
  std::vector<std::string> messages_;
  std::function<void()> on_message_;
};

TEST_F(NodeProgressBoardTest, ARankOutsideAnyCollectiveIsNamed) {
  set_collective_timeout(0.3, world_.rank());
  world_.barrier();
  if (world_.rank() == 1) {
    std::this_thread::sleep_for(1200ms);  // computing, far past the others' limit
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    const CollectiveScope scope("the probe barrier", world_);
    MPI_Barrier(MPI_COMM_WORLD);  // not Communicator::barrier: its own (slow) scope
  }
  set_collective_timeout(0, 0);
  const auto got = messages();
  if (world_.rank() == 1) {
    EXPECT_TRUE(got.empty()) << got[0];
    return;
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find(" s in the probe barrier (comm.peer_timeout_s = 0.3): " +
                        rank1("has been outside any watched collective for ")),
            std::string::npos)
      << got[0];
  EXPECT_NE(got[0].find("computing, hung, or in an MPI call echo does not watch; ending this rank so that mpirun ends "
                        "the job"),
            std::string::npos)
      << got[0];
  for (int r = 2; r < world_.size(); ++r)  // the others wait beside this rank: not culprits
    EXPECT_EQ(got[0].find("rank " + std::to_string(r) + " (pid"), std::string::npos) << got[0];
}

TEST_F(NodeProgressBoardTest, AStoppedRankIsNamedAndOnceContinuedBlamesNobody) {
  std::mutex m;
  std::condition_variable cv;
  bool continued = false;
  auto continue_rank1 = [&] {
    std::lock_guard<std::mutex> lock(m);
    if (!continued) kill(pids_[1], SIGCONT);
    continued = true;
    cv.notify_all();
  };
  if (world_.rank() == 0)
    on_message_ = [&] {
      std::this_thread::sleep_for(1500ms);  // rank 1 stays stopped well past its own limit
      continue_rank1();
    };
  // If rank 0's watchdog never fires (the bug this test looks for), rank 1 is continued anyway.
  std::thread rescue;
  if (world_.rank() == 0)
    rescue = std::thread([&] {
      std::unique_lock<std::mutex> lock(m);
      if (!cv.wait_for(lock, 20s, [&] { return continued; })) {
        kill(pids_[1], SIGCONT);
        continued = true;
      }
    });
  set_collective_timeout(1.0, world_.rank());
  world_.barrier();
  if (world_.rank() == 1) {
    const CollectiveScope scope("the stopped rank's barrier", world_);
    raise(SIGSTOP);
    MPI_Barrier(MPI_COMM_WORLD);
    // Still inside the scope for two more looks of the watchdog: with the stop counted as a wait
    // it would be reported now.
    std::this_thread::sleep_for(300ms);
  } else {
    const CollectiveScope scope("the probe barrier", world_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  set_collective_timeout(0, 0);
  if (rescue.joinable()) rescue.join();
  std::this_thread::sleep_for(200ms);  // a look in progress ends before what the handler uses goes
  on_message_ = nullptr;
  const auto got = messages();
  if (world_.rank() == 1) {
    EXPECT_TRUE(got.empty()) << got[0];
  } else if (world_.rank() == 0) {
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NE(got[0].find(" s in the probe barrier (comm.peer_timeout_s = 1): " +
                          rank1("is stopped (SIGSTOP or Ctrl-Z); ending this rank")),
              std::string::npos)
        << got[0];
  } else {
    EXPECT_LE(got.size(), 1u);  // ranks 2 and 3 may look before or after rank 0 continued it
  }
}

// Every rank waits in a "collective" nobody completes (a scope around a sleep) on `comm`, at a
// limit of 0.5 s, until every rank's watchdog has reported (an MPI_Ibarrier polled inside the
// scope, so no rank leaves before a slower one has looked), and returns its one message.
std::string wait_until_all_reported(NodeProgressBoardTest& t, const char* what, const Communicator& comm,
                                    const Communicator& world) {
  std::atomic<bool> fired{false};
  t.on_message_ = [&] { fired = true; };
  set_collective_timeout(0.5, world.rank());
  world.barrier();
  {
    const CollectiveScope scope(what, comm);
    const auto start = std::chrono::steady_clock::now();
    while (!fired && std::chrono::steady_clock::now() - start < 20s) std::this_thread::sleep_for(5ms);
    MPI_Request all_fired = MPI_REQUEST_NULL;
    MPI_Ibarrier(world.get(), &all_fired);
    for (int done = 0; !done;) {
      MPI_Test(&all_fired, &done, MPI_STATUS_IGNORE);
      std::this_thread::sleep_for(5ms);
    }
  }
  set_collective_timeout(0, 0);
  std::this_thread::sleep_for(200ms);  // a look in progress ends before `fired` goes
  t.on_message_ = nullptr;
  const auto got = t.messages();
  return got.size() == 1 ? got[0] : fmt::format("{} messages", got.size());
}

TEST_F(NodeProgressBoardTest, RanksWaitingInDifferentCollectivesAreADeadlock) {
  const std::string got =
      wait_until_all_reported(*this, world_.rank() == 0 ? "the probe wait" : "another wait", world_, world_);
  EXPECT_NE(got.find(": the ranks of one communicator called different collectives (a deadlock, or one rank took "
                     "another path); ending this rank"),
            std::string::npos)
      << got;
  if (world_.rank() == 0) {
    EXPECT_NE(got.find("rank 1 waits in another wait"), std::string::npos) << got;
    EXPECT_NE(got.find(", this rank in the probe wait"), std::string::npos) << got;
  } else {
    EXPECT_NE(got.find("rank 0 waits in the probe wait"), std::string::npos) << got;
  }
}

TEST_F(NodeProgressBoardTest, RanksWaitingInTheSameCollectiveMissNobodyHere) {
  set_collective_step(7);
  const std::string got = wait_until_all_reported(*this, "the same wait", world_, world_);
  set_collective_step(0);
  std::string others;
  for (int r = 0; r < world_.size(); ++r)
    if (r != world_.rank()) others += (others.empty() ? "" : ", ") + std::to_string(r);
  EXPECT_NE(got.find(" s in the same wait at step 7 (comm.peer_timeout_s = 0.5): rank(s) " + others +
                     " of this node wait in the same collective: nobody on this one-node job is missing, so MPI "
                     "itself makes no progress; ending this rank"),
            std::string::npos)
      << got;
}

// The same name on two communicators (pairs of ranks, as the TP groups of a dp > 1 job) is not
// "the same collective", nor a deadlock: a rank of the other pair waits on another communicator.
TEST_F(NodeProgressBoardTest, RanksWaitingOnAnotherCommunicatorAreNotADeadlock) {
  const bool pairs = world_.size() > 2;  // at 2 ranks, each alone
  const Communicator mine = world_.split(pairs ? world_.rank() / 2 : world_.rank(), world_.rank());
  const std::string got = wait_until_all_reported(*this, "a group's wait", mine, world_);
  const int other = pairs ? (world_.rank() < 2 ? 2 : 0) : 1 - world_.rank();
  EXPECT_NE(got.find(fmt::format("rank {} waits in a group's wait (on another communicator)", other)),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("deadlock"), std::string::npos) << got;
  if (pairs) {  // the partner waits in the same collective on the same communicator
    EXPECT_NE(got.find(fmt::format("rank(s) {} of this node wait in the same collective", world_.rank() ^ 1)),
              std::string::npos)
        << got;
  }
  EXPECT_NE(got.find(": no rank of this one-node job is stopped or outside a collective; MPI makes no progress, or "
                     "the ranks wait on each other across communicators; ending this rank"),
            std::string::npos)
      << got;
}

// A board that cannot be made on one rank (here the node's first rank, whose file size limit
// refuses the memory's bytes) is made on none: every rank goes without, saying why.
TEST_F(NodeProgressBoardTest, ABoardThatOneRankCannotMakeIsMadeByNone) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = signal(SIGXFSZ, SIG_IGN);
  if (world_.rank() == 0) {
    rlimit tiny = before;
    tiny.rlim_cur = 16;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  }
  std::string why;
  NodeProgressBoard* board = NodeProgressBoard::create(world_, &why);
  if (world_.rank() == 0) setrlimit(RLIMIT_FSIZE, &before);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(board, nullptr);
  if (world_.rank() == 0)
    EXPECT_NE(why.find("fallocate of 4096 bytes: File too large"), std::string::npos) << why;
  else
    EXPECT_NE(why.find("the node's first rank could not make it"), std::string::npos) << why;
}

TEST(ProcessStat, StoppedExitedAndReapedChildren) {
  const ProcessStat self = process_stat(static_cast<int>(getpid()));
  EXPECT_EQ(self.state, 'R');  // reading its own stat: this thread runs
  EXPECT_GT(self.start_ticks, 0u);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  const ProcessStat stopped = process_stat(child);
  EXPECT_EQ(stopped.state, 'T');
  EXPECT_GE(stopped.start_ticks, self.start_ticks);
  kill(child, SIGCONT);
  // Exited, not reaped yet: a zombie with the same start time.
  ProcessStat zombie;
  for (int i = 0; i < 2000 && zombie.state != 'Z'; ++i) {
    std::this_thread::sleep_for(1ms);
    zombie = process_stat(child);
  }
  EXPECT_EQ(zombie.state, 'Z');
  EXPECT_EQ(zombie.start_ticks, stopped.start_ticks);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(process_stat(child).state, 0);
  EXPECT_EQ(process_stat(0).state, 0);
  EXPECT_EQ(process_stat(-5).state, 0);
}

// Runs `look` with this process's descriptors used up (RLIMIT_NOFILE lowered to 64, then filled),
// and gives them back. Returns open()'s errno once full (EMFILE).
int with_no_descriptors_left(const std::function<void()>& look) {
  rlimit before{};
  if (getrlimit(RLIMIT_NOFILE, &before) != 0) return errno;
  rlimit low = before;
  low.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) return errno;
  std::vector<int> fds;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fds.push_back(fd);
  const int open_errno = errno;
  look();
  for (const int fd : fds) close(fd);
  setrlimit(RLIMIT_NOFILE, &before);
  return open_errno;
}

// Out of descriptors, rank 0 cannot read rank 1's /proc: a live rank 1 is no problem, and a
// stopped one is judged by its heartbeat, never called gone.
TEST_F(NodeProgressBoardTest, AProcReadThatFailsFallsBackToTheHeartbeat) {
  world_.barrier();
  if (world_.rank() == 0) {
    std::string alive, stopped;
    ASSERT_EQ(with_no_descriptors_left([&] { alive = describe_peer_process(1); }), EMFILE);
    EXPECT_EQ(alive, "");
    kill(pids_[1], SIGSTOP);
    std::this_thread::sleep_for(1500ms);  // past two looks + 1 s: its heartbeat is stale
    ASSERT_EQ(with_no_descriptors_left([&] { stopped = describe_peer_process(1); }), EMFILE);
    kill(pids_[1], SIGCONT);
    EXPECT_EQ(stopped.find("is gone"), std::string::npos) << stopped;
    EXPECT_NE(stopped.find(rank1("has not run for ")), std::string::npos) << stopped;
    EXPECT_NE(stopped.find("(/proc/" + std::to_string(pids_[1]) +
                           "/stat could not be read: Too many open files: "
                           "stopped, gone or starved of CPU)"),
              std::string::npos)
        << stopped;
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1 waits here, stopped and continued
}

// A rank out of descriptors cannot read /proc: that says nothing of the peer, which must not be
// called gone (the board then goes by the peer's heartbeat).
TEST(ProcessStat, AReadThatFailsIsNotAProcessGone) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit low = before;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fds;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fds.push_back(fd);
  const int open_errno = errno;
  const ProcessStat st = process_stat(static_cast<int>(getpid()));
  for (const int fd : fds) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_EQ(open_errno, EMFILE);
  EXPECT_EQ(st.state, 0);
  EXPECT_EQ(st.read_error, EMFILE);
  // With descriptors back, the same read sees this process, and an absent one is no error.
  EXPECT_EQ(process_stat(static_cast<int>(getpid())).read_error, 0);
  EXPECT_EQ(process_stat(std::numeric_limits<int>::max()).read_error, 0);
}

}  // namespace
}  // namespace echo::dist
