// The node's progress board: one cache line per rank in a page of POSIX shared memory.
#include "dist/node_progress_board.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <vector>

#include "core/seconds_text.h"
#include "core/stopwatch.h"
#include "dist/communicator.h"
#include "dist/mpi_check.h"

namespace echo::dist {

constexpr int kWhatChars = 96;

// Every field is an atomic: the slot is written by one process and read by others. The scope
// fields are a seqlock (generation odd while written), as in the watchdog itself; a process
// stopped in the middle of a write leaves it odd, and a reader then goes by /proc and the
// heartbeat alone.
struct alignas(64) ProgressSlot {
  std::atomic<int32_t> world_rank{-1};
  std::atomic<int32_t> pid{0};
  std::atomic<uint64_t> start_ticks{0};  // the process's start time in /proc/<pid>/stat
  std::atomic<int64_t> heartbeat_ns{0};  // the watchdog thread's last look; 0: it never looked
  std::atomic<int64_t> poll_ns{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<int32_t> inside{0};  // 1: in a collective
  std::atomic<int64_t> since_ns{0};
  std::atomic<int64_t> step{0};
  std::atomic<char> what[kWhatChars] = {};  // the collective it is in, or the last one it left
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the board is shared between processes: its atomics must not take a lock");

namespace {

ProcessStat read_stat(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return {};
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the fields start after the
  // last ')'. The state is field 3, the start time field 22.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(text.substr(close + 1));
  ProcessStat s;
  std::string skip;
  fields >> s.state;
  for (int field = 4; field < 22 && fields; ++field) fields >> skip;
  fields >> s.start_ticks;
  if (!fields) return {};
  return s;
}

// A consistent copy of a slot's scope fields; nullopt-like `stable = false` when the writer was
// caught (and possibly stopped) in the middle of a change.
struct ScopeView {
  bool stable = false;
  bool inside = false;
  int64_t since_ns = 0;
  int64_t step = 0;
  std::string what;
};

ScopeView read_scope(const ProgressSlot& slot) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t gen = slot.generation.load();
    if (gen & 1) continue;
    ScopeView v;
    v.inside = slot.inside.load() != 0;
    v.since_ns = slot.since_ns.load();
    v.step = slot.step.load();
    for (const auto& c : slot.what) {
      const char ch = c.load();
      if (ch == '\0') break;
      v.what.push_back(ch);
    }
    if (slot.generation.load() != gen) continue;
    v.stable = true;
    return v;
  }
  return {};
}

std::string at_step(int64_t step) { return step > 0 ? fmt::format(" at step {}", step) : std::string(); }

}  // namespace

ProcessStat process_stat(int pid) { return pid > 0 ? read_stat(pid) : ProcessStat{}; }

NodeProgressBoard::NodeProgressBoard(ProgressSlot* slots, int local_size, int local_rank, int world_size)
    : slots_(slots), local_size_(local_size), local_rank_(local_rank), world_size_(world_size) {}

NodeProgressBoard* NodeProgressBoard::create(const Communicator& comm, std::string* why) {
  MPI_Comm local_comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &local_comm));
  Communicator local = Communicator::adopt(local_comm);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (static_cast<size_t>(local.size()) * sizeof(ProgressSlot) + page - 1) / page * page;

  // The node's first rank makes the memory under a fresh name and hands the name on.
  std::string failure;
  char name[64] = {};
  int fd = -1;
  if (local.rank() == 0) {
    std::snprintf(name, sizeof name, "/echo-progress-%d-%08x", static_cast<int>(getpid()), std::random_device{}());
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
      failure = fmt::format("shm_open({}): {}", name, std::strerror(errno));
    else if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      failure = fmt::format("ftruncate of {} to {} bytes: {}", name, bytes, std::strerror(errno));
    if (!failure.empty()) {
      if (fd >= 0) shm_unlink(name);
      name[0] = '\0';
    }
  }
  MPI_CHECK(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, local.get()));
  if (local.rank() != 0) {
    if (name[0] == '\0')
      failure = "the node's first rank could not make it";
    else if ((fd = shm_open(name, O_RDWR, 0)) < 0)
      failure = fmt::format("shm_open({}): {}", name, std::strerror(errno));
  }
  void* memory = MAP_FAILED;
  if (fd >= 0) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory == MAP_FAILED) failure = fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno));
    close(fd);
  }
  // Once every rank of the node has it mapped (or failed), the name goes: nothing stays behind.
  local.barrier();
  if (local.rank() == 0 && name[0] != '\0') shm_unlink(name);
  if (!comm.all_ranks(failure.empty())) {
    if (memory != MAP_FAILED) munmap(memory, bytes);
    if (why) *why = failure.empty() ? "another rank could not map it" : failure;
    return nullptr;
  }
  auto* slots = static_cast<ProgressSlot*>(memory);
  ProgressSlot* mine = new (&slots[local.rank()]) ProgressSlot;
  mine->world_rank.store(comm.rank());
  mine->pid.store(static_cast<int32_t>(getpid()));
  mine->start_ticks.store(read_stat(static_cast<int>(getpid())).start_ticks);
  auto* board = new NodeProgressBoard(slots, local.size(), local.rank(), comm.size());
  board->leave(steady_now_ns());  // outside any collective since now
  local.barrier();  // every slot is constructed before anyone reads it
  return board;
}

void NodeProgressBoard::enter(const char* what, int64_t step, int64_t now_ns) {
  ProgressSlot& s = slots_[local_rank_];
  s.generation.fetch_add(1);
  s.inside.store(1);
  s.since_ns.store(now_ns);
  s.step.store(step);
  int i = 0;
  for (; what && what[i] != '\0' && i < kWhatChars - 1; ++i) s.what[i].store(what[i]);
  s.what[i].store('\0');
  s.generation.fetch_add(1);
}

void NodeProgressBoard::leave(int64_t now_ns) {
  ProgressSlot& s = slots_[local_rank_];
  s.generation.fetch_add(1);
  s.inside.store(0);
  s.since_ns.store(now_ns);  // the collective's name and step stay: "since leaving ..."
  s.generation.fetch_add(1);
}

void NodeProgressBoard::beat(int64_t now_ns, int64_t poll_ns) {
  ProgressSlot& s = slots_[local_rank_];
  s.poll_ns.store(poll_ns);
  s.heartbeat_ns.store(now_ns);
}

std::string NodeProgressBoard::describe_others(int64_t now_ns, int64_t waited_ns) const {
  std::vector<std::string> holding;  // the ranks that hold this one up
  std::vector<int> waiting;
  for (int i = 0; i < local_size_; ++i) {
    if (i == local_rank_) continue;
    const ProgressSlot& s = slots_[i];
    const int rank = s.world_rank.load(), pid = s.pid.load();
    const std::string who = fmt::format("rank {} (pid {})", rank, pid);
    // /proc speaks for the process only when it is the same one (a pid namespace of its own
    // shows another process, or none, under that number).
    const ProcessStat stat = process_stat(pid);
    const bool same_process = stat.state != 0 && stat.start_ticks == s.start_ticks.load();
    const int64_t beat = s.heartbeat_ns.load(), poll = s.poll_ns.load();
    const bool not_running = beat > 0 && now_ns - beat > 2 * poll + 1'000'000'000;
    if ((same_process && (stat.state == 'Z' || stat.state == 'X')) || (stat.state == 0 && not_running)) {
      holding.push_back(who + " is gone (it exited or was killed)");
      continue;
    }
    if (same_process && (stat.state == 'T' || stat.state == 't')) {
      holding.push_back(who + " is stopped (SIGSTOP, Ctrl-Z or a debugger)");
      continue;
    }
    if (not_running) {
      holding.push_back(fmt::format("{} has not run for {} s (starved of CPU, swapped out or stopped)", who,
                                    seconds_text(static_cast<double>(now_ns - beat) * 1e-9)));
      continue;
    }
    const ScopeView v = read_scope(s);
    if (!v.stable) continue;
    const int64_t for_ns = now_ns - v.since_ns;
    if (v.inside || for_ns < waited_ns / 2) {
      waiting.push_back(rank);
      continue;
    }
    holding.push_back(fmt::format("{} has been outside any collective for {} s ({}): computing, or hung outside MPI",
                                  who, seconds_text(static_cast<double>(for_ns) * 1e-9),
                                  v.what.empty() ? std::string("since it started")
                                                 : fmt::format("since it left {}{}", v.what, at_step(v.step))));
  }
  std::string text;
  for (const std::string& h : holding) text += (text.empty() ? "" : "; ") + h;
  const int elsewhere = world_size_ - local_size_;
  if (!text.empty()) return text;
  text = local_size_ > 1 ? fmt::format("every other rank on this node ({}) is in a collective or has just left one",
                                       fmt::join(waiting, ", "))
                         : std::string("no other rank runs on this node");
  return elsewhere > 0 ? fmt::format("{}: one of the {} ranks on other nodes is stopped, hung or gone", text,
                                     elsewhere)
                       : fmt::format("{}: the ranks wait in different collectives (a deadlock) or MPI itself is stuck",
                                     text);
}

}  // namespace echo::dist
