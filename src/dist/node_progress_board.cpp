// The node's progress board: one slot per rank in anonymous shared memory (a memfd).
#include "dist/node_progress_board.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
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
  std::atomic<uint64_t> members{0};         // the communicator's Communicator::members_id(); 0: unknown
  std::atomic<char> what[kWhatChars] = {};  // the collective it is in, or the last one it left
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the board is shared between processes: its atomics must not take a lock");

namespace {

ProcessStat read_stat(int pid) {
  ProcessStat s;
  // open/read, not a stream: errno must say why a read failed. No such file (ENOENT, or ESRCH
  // for a process that ends while read) is "no such process"; anything else (EMFILE when the
  // rank is out of descriptors, EACCES under hidepid) says nothing about the process.
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  char buffer[1024];
  ssize_t n = -1;
  if (fd >= 0) {
    n = read(fd, buffer, sizeof buffer - 1);
    const int read_errno = errno;
    close(fd);
    errno = read_errno;
  }
  if (n < 0) {
    if (errno != ENOENT && errno != ESRCH) s.read_error = errno;
    return s;
  }
  const std::string text(buffer, static_cast<size_t>(n));
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the fields start after the
  // last ')'. The state is field 3, the start time field 22.
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return s;
  std::istringstream fields(text.substr(close_paren + 1));
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
  uint64_t members = 0;
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
    v.members = slot.members.load();
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

std::string who(const ProgressSlot& s) { return fmt::format("rank {} (pid {})", s.world_rank.load(), s.pid.load()); }

std::string seconds_between(int64_t from_ns, int64_t to_ns) {
  return seconds_text(static_cast<double>(to_ns - from_ns) * 1e-9);
}

// The node's first rank makes the memory (a memfd: no name in /dev/shm to leave behind, and
// fallocate reserves its pages, so a full tmpfs is an error here and never a SIGBUS at the first
// write), and the others open it through /proc/<pid>/fd. Returns the mapping or the reason.
void* map_shared(const Communicator& local, size_t bytes, std::string& failure) {
  int fd = -1;
  // The maker's pid and fd, and the memory's device and inode: a rank in another pid namespace
  // would find another process's file under that path, which it must not write into.
  int64_t origin[4] = {getpid(), -1, 0, 0};
  struct stat made {};
  if (local.rank() == 0) {
    fd = memfd_create("echo-progress", MFD_CLOEXEC);
    if (fd < 0) {
      failure = fmt::format("memfd_create: {}", std::strerror(errno));
    } else if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
      failure = fmt::format("fallocate of {} bytes: {}", bytes, std::strerror(err));
      close(fd);
      fd = -1;
    }
    if (fd >= 0 && fstat(fd, &made) != 0) {
      failure = fmt::format("fstat of the memfd: {}", std::strerror(errno));
      close(fd);
      fd = -1;
    }
    origin[1] = fd;
    origin[2] = static_cast<int64_t>(made.st_dev);
    origin[3] = static_cast<int64_t>(made.st_ino);
  }
  MPI_CHECK(MPI_Bcast(origin, 4, MPI_INT64_T, 0, local.get()));
  if (local.rank() != 0) {
    const std::string path = fmt::format("/proc/{}/fd/{}", origin[0], origin[1]);
    if (origin[1] < 0)
      failure = "the node's first rank could not make it";
    else if ((fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0)
      failure = fmt::format("open {}: {}", path, std::strerror(errno));
  }
  void* memory = MAP_FAILED;
  if (fd >= 0) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<int64_t>(st.st_dev) != origin[2] ||
        static_cast<int64_t>(st.st_ino) != origin[3])
      failure = fmt::format("/proc/{}/fd/{} is not the node's first rank's memory (another pid namespace?)", origin[0],
                            origin[1]);
    else if (static_cast<size_t>(st.st_size) < bytes)
      failure = fmt::format("the shared memory holds {} bytes, not {}", static_cast<long long>(st.st_size), bytes);
    else if ((memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
      failure = fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno));
  }
  // The maker keeps its descriptor until every rank of the node has opened its own.
  local.barrier();
  if (fd >= 0) close(fd);
  return memory == MAP_FAILED ? nullptr : memory;
}

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
  std::string failure;
  void* memory = map_shared(local, bytes, failure);
  if (!comm.all_ranks(failure.empty())) {
    if (memory) munmap(memory, bytes);
    if (why) *why = failure.empty() ? "another rank could not map it (its own warning says why)" : failure;
    return nullptr;
  }
  auto* slots = static_cast<ProgressSlot*>(memory);
  ProgressSlot* mine = new (&slots[local.rank()]) ProgressSlot;
  mine->world_rank.store(comm.rank());
  mine->pid.store(static_cast<int32_t>(getpid()));
  mine->start_ticks.store(read_stat(static_cast<int>(getpid())).start_ticks);
  auto* board = new NodeProgressBoard(slots, local.size(), local.rank(), comm.size());
  board->leave(steady_now_ns());  // outside any collective since now
  local.barrier();                // every slot is constructed before anyone reads it
  // /proc speaks for a peer only if it shows that process now (a pid namespace of its own, or a
  // /proc that is not the host's, shows another process or none under its number).
  board->visible_.resize(static_cast<size_t>(local.size()));
  for (int i = 0; i < local.size(); ++i) {
    const ProcessStat st = read_stat(slots[i].pid.load());
    board->visible_[static_cast<size_t>(i)] = st.state != 0 && st.start_ticks == slots[i].start_ticks.load();
  }
  return board;
}

void NodeProgressBoard::enter(const char* what, int64_t step, uint64_t members, int64_t now_ns) {
  ProgressSlot& s = slots_[local_rank_];
  s.generation.fetch_add(1);
  s.inside.store(1);
  s.since_ns.store(now_ns);
  s.step.store(step);
  s.members.store(members);
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

std::string NodeProgressBoard::process_problem(int i, int64_t now_ns) const {
  const ProgressSlot& s = slots_[i];
  const int64_t beat = s.heartbeat_ns.load(), poll = s.poll_ns.load();
  const bool not_running = beat > 0 && now_ns - beat > 2 * poll + 1'000'000'000;
  // Without /proc (a peer it did not show at start-up, or a read that fails now: this rank out of
  // descriptors) the heartbeat alone speaks; the caller goes on to the scopes, which need no /proc.
  const auto heartbeat_only = [&](const std::string& why) {
    return not_running ? fmt::format("has not run for {} s ({}: stopped, gone or starved of CPU)",
                                     seconds_between(beat, now_ns), why)
                       : std::string();
  };
  if (!visible_[static_cast<size_t>(i)]) return heartbeat_only("its process cannot be seen from here");
  const ProcessStat st = process_stat(s.pid.load());
  if (st.read_error != 0)
    return heartbeat_only(
        fmt::format("/proc/{}/stat could not be read: {}", s.pid.load(), std::strerror(st.read_error)));
  // No process under the number now, or another one (the number was reused): it ended.
  if (st.state == 0 || st.start_ticks != s.start_ticks.load() || st.state == 'Z' || st.state == 'X')
    return "is gone (it exited or was killed)";
  if (st.state == 'T') return "is stopped (SIGSTOP or Ctrl-Z)";
  if (st.state == 't') return "is stopped by a debugger (ptrace)";
  if (not_running)
    return fmt::format("has not run for {} s (starved of CPU or swapped out)", seconds_between(beat, now_ns));
  return {};
}

std::string NodeProgressBoard::describe_process(int world_rank, int64_t now_ns) const {
  for (int i = 0; i < local_size_; ++i) {
    if (i == local_rank_ || slots_[i].world_rank.load() != world_rank) continue;
    const std::string problem = process_problem(i, now_ns);
    return problem.empty() ? problem : who(slots_[i]) + " " + problem;
  }
  return {};
}

std::string NodeProgressBoard::describe_others(int64_t now_ns, int64_t waited_ns, const char* what, int64_t step,
                                               uint64_t members) const {
  std::vector<std::string> holding;      // the ranks that hold this one up
  std::vector<std::string> deadlocked;   // waiting in another collective or step of this communicator
  std::vector<std::string> other_comms;  // waiting on another communicator
  std::vector<int> same, moving, unread;
  const std::string mine = std::string(what).substr(0, kWhatChars - 1);  // as a slot holds it
  for (int i = 0; i < local_size_; ++i) {
    if (i == local_rank_) continue;
    const ProgressSlot& s = slots_[i];
    if (const std::string problem = process_problem(i, now_ns); !problem.empty()) {
      holding.push_back(who(s) + " " + problem);
      continue;
    }
    const ScopeView v = read_scope(s);
    if (!v.stable) {
      unread.push_back(s.world_rank.load());
      continue;
    }
    const int64_t for_ns = now_ns - v.since_ns;
    if (v.inside) {
      const std::string waits = fmt::format("rank {} waits in {}{}", s.world_rank.load(), v.what, at_step(v.step));
      if (v.members != members && v.members != 0 && members != 0)
        other_comms.push_back(waits + " (on another communicator)");
      else if (v.what == mine && v.step == step)
        same.push_back(s.world_rank.load());
      else
        deadlocked.push_back(waits);
      continue;
    }
    if (for_ns < waited_ns / 2) {  // between two collectives: not what holds this one up
      moving.push_back(s.world_rank.load());
      continue;
    }
    // In state D the process sleeps in the kernel: a hung file system or device.
    const ProcessStat st = visible_[static_cast<size_t>(i)] ? process_stat(s.pid.load()) : ProcessStat{};
    holding.push_back(fmt::format(
        "{} has been outside any watched collective for {} s ({}){}: computing, hung, or in an MPI call echo does not "
        "watch",
        who(s), seconds_between(v.since_ns, now_ns),
        v.what.empty() ? std::string("since it started") : fmt::format("since it left {}{}", v.what, at_step(v.step)),
        st.state == 'D' ? ", its process in the kernel's uninterruptible wait (a hung file system or device?)" : ""));
  }
  constexpr size_t kListed = 8;  // a node of 64 ranks gets a line, not a page
  const auto listed = [&](const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size() && i < kListed; ++i) text += (i ? "; " : "") + items[i];
    if (items.size() > kListed) text += fmt::format("; and {} more", items.size() - kListed);
    return text;
  };
  if (!holding.empty()) return listed(holding);
  const auto ranks = [](const std::vector<int>& r) {
    return r.size() <= kListed
               ? fmt::format("{}", fmt::join(r, ", "))
               : fmt::format("{}, ... ({} ranks)", fmt::join(r.begin(), r.begin() + kListed, ", "), r.size());
  };
  std::vector<std::string> parts;
  if (!same.empty()) parts.push_back(fmt::format("rank(s) {} of this node wait in the same collective", ranks(same)));
  if (!deadlocked.empty())
    parts.push_back(listed(deadlocked) + fmt::format(", this rank in {}{}", what, at_step(step)));
  if (!other_comms.empty()) parts.push_back(listed(other_comms));
  if (!moving.empty()) parts.push_back(fmt::format("rank(s) {} just left a collective", ranks(moving)));
  if (!unread.empty()) parts.push_back(fmt::format("rank(s) {} could not be read", ranks(unread)));
  std::string text = local_size_ > 1 ? listed(parts) : std::string("no other rank of the job runs on this node");
  const int others = world_size_ - local_size_;
  if (!deadlocked.empty())
    return text +
           ": the ranks of one communicator called different collectives (a deadlock, or one rank took another "
           "path)";
  if (others > 0)
    return fmt::format("{}: the rank that holds it up is one of the {} on other nodes (stopped, hung or gone)", text,
                       others);
  if (other_comms.empty() && moving.empty() && unread.empty())
    return text + ": nobody on this one-node job is missing, so MPI itself makes no progress";
  return text +
         ": no rank of this one-node job is stopped or outside a collective; MPI makes no progress, or the "
         "ranks wait on each other across communicators";
}

}  // namespace echo::dist
