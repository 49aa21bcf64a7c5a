// The collective watchdog: one detached thread polling what the main thread's scope published.
#include "dist/collective_watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/runnable_clock.h"
#include "core/seconds_text.h"
#include "core/stopwatch.h"
#include "dist/communicator.h"
#include "dist/node_progress_board.h"

namespace echo::dist {
namespace {

// A watching thread's looks: sleeps the poll asked for, then says when it woke and how much of the
// time since its last look this process was stopped (0 unless the look came far later than asked:
// below that, a scheduler's noise). A thread woken far later than asked was stopped, or starved
// of a CPU: the part of the delay it was not even runnable (core/runnable_clock.h) is its stop.
// Make it on the thread that uses it.
class LookClock {
 public:
  struct Look {
    int64_t now;
    int64_t poll;
    int64_t stopped_ns;
  };
  Look next(int64_t poll) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(poll));
    const int64_t now = steady_now_ns();
    const int64_t late = now - last_look_ - poll;  // beyond the sleep asked for
    const int64_t runnable_now = runnable_.read();
    const int64_t stopped = stopped_part_ns(now - last_look_, poll, runnable_growth(last_runnable_, runnable_now));
    last_look_ = now;
    last_runnable_ = runnable_now;
    return Look{now, poll, late > std::max<int64_t>(2 * poll, 200'000'000) ? stopped : 0};
  }

 private:
  const RunnableClock runnable_;  // tells this thread's stop from its starvation
  int64_t last_look_ = steady_now_ns();
  int64_t last_runnable_ = runnable_.read();
};

struct Watchdog {
  std::atomic<int64_t> timeout_ns{0};       // a step scope's limit (comm.peer_timeout_s); 0: off
  std::atomic<int64_t> slow_timeout_ns{0};  // a slow scope's limit (comm.save_timeout_s); 0: off
  std::atomic<int> rank{0};
  // The training step the loop is in (1-based); 0: not in a step. The scope in force keeps the
  // step it started in (scope_step), which the message names.
  std::atomic<int64_t> step{0};
  std::atomic<int64_t> scope_step{0};
  // The scope in force: what it is, when it started, and a number that changes with every scope
  // so the thread never blames a later collective for an earlier one's time.
  std::atomic<const char*> what{nullptr};
  std::atomic<int> patience{static_cast<int>(Patience::step)};
  std::atomic<int64_t> since_ns{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> members{0};  // the scope's Communicator::members_id()
  std::mutex handler_mutex;
  std::function<void(const std::string&)> handler;
  std::once_flag started;
  std::once_flag devices_started;
  // Where this node's ranks are (dist/node_progress_board.h); null until watch_peers_on_node().
  std::atomic<NodeProgressBoard*> board{nullptr};
  // The device collectives' probes (watched by their own thread), and per probe the call it last
  // reported.
  struct DeviceWatch {
    DeviceCollectiveProbe probe;
    uint64_t id = 0;              // the call it reported last (0: none)
    int64_t seen_ns = 0;          // the look that first found the device in it
    int64_t stopped_base_ns = 0;  // the device thread's stopped total at that look
    bool fired = false;
  };
  std::mutex probes_mutex;
  std::map<uint64_t, DeviceWatch> probes;
  uint64_t next_probe = 1;

  // A seqlock: the generation is odd while a change is written and moves on by two with each
  // (sequentially consistent, like every access here: a few atomic stores beside an MPI
  // collective cost nothing), so the thread, which reads it before and after the fields and skips
  // an odd or changed one, never mixes two scopes.
  void publish(const char* w, Patience p, uint64_t comm) {
    generation.fetch_add(1);
    since_ns.store(steady_now_ns());
    scope_step.store(step.load());
    what.store(w);
    patience.store(static_cast<int>(p));
    members.store(comm);
    generation.fetch_add(1);
    if (NodeProgressBoard* b = board.load()) {
      if (w)
        b->enter(w, scope_step.load(), comm, since_ns.load());
      else
        b->leave(since_ns.load());
    }
  }

  // Nanoseconds between looks: a quarter of the smaller limit in force (at most 0.1 s, at least
  // 10 ms): an overrun is seen within 1.25 of its limit, a step scope's as soon as a slow one's.
  // Short looks also tell a stop of this process (a look far later than asked) from a scheduler's
  // delay, and keep the heartbeat fresh; ten wake-ups a second cost nothing.
  int64_t poll_ns() const {
    const int64_t step_limit = timeout_ns.load(), slow_limit = slow_timeout_ns.load();
    const int64_t smaller =
        step_limit > 0 && slow_limit > 0 ? std::min(step_limit, slow_limit) : std::max(step_limit, slow_limit);
    return smaller > 0 ? std::clamp<int64_t>(smaller / 4, 10'000'000, 100'000'000) : 100'000'000;
  }

  void watch() {
    uint64_t fired_for = ~uint64_t{0};
    // Time this process did not run (SIGSTOP, Ctrl-Z) while the scope `excused_for` was in force.
    // It is not a wait for a peer: a rank stopped inside a collective, continued (mpirun's abort
    // continues it before ending it), must not blame the peers it kept waiting.
    uint64_t excused_for = ~uint64_t{0};
    int64_t excused_ns = 0;
    LookClock clock;
    for (;;) {
      const LookClock::Look look = clock.next(poll_ns());
      const int64_t now = look.now;
      if (NodeProgressBoard* b = board.load()) b->beat(now, look.poll);
      const uint64_t gen = generation.load();
      const char* w = what.load();
      const bool slow = patience.load() == static_cast<int>(Patience::slow);
      const int64_t since = since_ns.load();
      const int64_t in_step = scope_step.load();
      const uint64_t in_comm = members.load();
      if ((gen & 1) != 0 || w == nullptr || gen == fired_for || generation.load() != gen) continue;
      if (gen != excused_for) excused_for = gen, excused_ns = 0;
      excused_ns += std::min(look.stopped_ns, std::max<int64_t>(0, now - since));
      // The limit of the scope's patience in force now (it may have been turned off).
      const int64_t timeout = slow ? slow_timeout_ns.load() : timeout_ns.load();
      if (timeout <= 0) continue;
      const int64_t waited = now - since - excused_ns;
      if (waited <= timeout) continue;
      fired_for = gen;
      const NodeProgressBoard* b = board.load();
      fire(
          fmt::format("[rank {}] error: no progress for {} s in {}{} ({} = {:g}): {}; ending this rank so that "
                      "mpirun ends the job",
                      rank.load(), seconds_text(static_cast<double>(waited) * 1e-9), w,
                      in_step > 0 ? fmt::format(" at step {}", in_step) : std::string(),
                      slow ? "comm.save_timeout_s" : "comm.peer_timeout_s", static_cast<double>(timeout) * 1e-9,
                      b ? b->describe_others(now, waited, w, in_step, in_comm)
                        : std::string("a peer rank is stopped, hung or gone")));
    }
  }

  // The device collectives' own thread (started with the first probe). NOTE: not the scopes'
  // thread: a probe makes CUDA calls, and one that blocks in the driver (a device wedged by the
  // very hang it should report) must not stop the MPI timeouts and the heartbeat too. A call is
  // timed from the first look that finds this GPU has reached it (its probe reports it only
  // then), not from its enqueue: the host runs up to a step of work ahead of the device, and that
  // queue is no peer's fault. Time this process was stopped since then is excused, per call.
  void watch_devices() {
    LookClock clock;
    int64_t stopped_total_ns = 0;
    for (;;) {
      const LookClock::Look look = clock.next(poll_ns());
      stopped_total_ns += look.stopped_ns;
      check_device_collectives(look.now, stopped_total_ns);
    }
  }

  void check_device_collectives(int64_t now, int64_t stopped_total_ns) {
    const int64_t timeout = timeout_ns.load();
    std::vector<std::string> overdue;
    {
      std::lock_guard<std::mutex> lock(probes_mutex);
      for (auto& [handle, watch] : probes) {
        const PendingDeviceCollective p = watch.probe();
        if (p.id != watch.id) {
          watch.id = p.id;
          watch.seen_ns = now;
          watch.stopped_base_ns = stopped_total_ns;
          watch.fired = false;
        }
        if (p.id == 0 || timeout <= 0 || watch.fired) continue;
        const int64_t waited = now - watch.seen_ns - (stopped_total_ns - watch.stopped_base_ns);
        if (waited <= timeout) continue;
        watch.fired = true;
        overdue.push_back(fmt::format(
            "[rank {}] error: no progress for {} s in {} on this rank's GPU, enqueued{} (comm.peer_timeout_s = {:g}; "
            "timed from when the GPU reached it): a peer rank of its communicator is stopped, hung or gone, or never "
            "made the same call; ending this rank so that mpirun ends the job",
            rank.load(), seconds_text(static_cast<double>(waited) * 1e-9), p.what,
            p.step > 0 ? fmt::format(" at step {}", p.step) : std::string(), static_cast<double>(timeout) * 1e-9));
      }
    }
    for (const std::string& message : overdue) fire(message);  // NOTE: outside the lock: a handler may unregister
  }

  void fire(const std::string& message) {
    std::function<void(const std::string&)> h;
    {
      std::lock_guard<std::mutex> lock(handler_mutex);
      h = handler;
    }
    if (h) return h(message);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
};

// Never destroyed: the detached thread may still look at it while the process exits.
Watchdog& watchdog() {
  static Watchdog* w = new Watchdog;
  return *w;
}

void start_thread(Watchdog& w) {
  std::call_once(w.started, [&w] { std::thread([&w] { w.watch(); }).detach(); });
}

}  // namespace

void set_collective_timeout(double seconds, int rank) {
  Watchdog& w = watchdog();
  w.rank.store(rank);
  w.timeout_ns.store(limit_ns(seconds));
  if (seconds > 0) start_thread(w);
}

void set_slow_collective_timeout(double seconds) {
  Watchdog& w = watchdog();
  w.slow_timeout_ns.store(limit_ns(seconds));
  if (seconds > 0) start_thread(w);
}

void watch_peers_on_node() {
  Watchdog& w = watchdog();
  const Communicator comm = Communicator::borrow(MPI_COMM_WORLD);
  const CollectiveScope watched("start-up's sharing of progress within the node", comm, Patience::slow);
  // Decided together: a rank that returned early here while the others made a board would leave
  // them waiting in its collectives.
  const bool had = w.board.load() != nullptr;
  if (comm.all_ranks(had)) return;
  std::string why;
  NodeProgressBoard* b = NodeProgressBoard::create(comm, &why);
  if (!b) {
    // Each rank says why in its own words (the failing rank's reason is its own).
    log::get("dist")->warn(
        "[rank {}] the collective watchdog cannot see the other ranks of this node ({}): a "
        "timeout will say \"a peer rank\" instead of naming it",
        comm.rank(), why);
    return;
  }
  if (had) return;  // this rank's board stays (the new one is never used)
  // The scope in force now (usually none) goes on the board before the thread can read it.
  const char* in = w.what.load();
  if (in) b->enter(in, w.scope_step.load(), w.members.load(), w.since_ns.load());
  w.board.store(b);
}

std::string describe_peer_process(int world_rank) {
  const NodeProgressBoard* b = watchdog().board.load();
  return b ? b->describe_process(world_rank, steady_now_ns()) : std::string();
}

void set_collective_step(int64_t step) { watchdog().step.store(step); }

int64_t collective_step() { return watchdog().step.load(); }

bool device_collectives_watched() { return watchdog().timeout_ns.load(std::memory_order_relaxed) > 0; }

uint64_t add_device_collective_probe(DeviceCollectiveProbe probe) {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.probes_mutex);
  const uint64_t handle = w.next_probe++;
  w.probes[handle].probe = std::move(probe);
  std::call_once(w.devices_started, [&w] { std::thread([&w] { w.watch_devices(); }).detach(); });
  return handle;
}

void remove_device_collective_probe(uint64_t handle) {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.probes_mutex);  // waits out a look that is calling it
  w.probes.erase(handle);
}

void set_collective_timeout_handler(std::function<void(const std::string& message)> handler) {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> lock(w.handler_mutex);
  w.handler = std::move(handler);
}

CollectiveScope::CollectiveScope(const char* what, const Communicator& comm, Patience patience) noexcept
    : CollectiveScope(what, comm.members_id(), patience) {}

CollectiveScope::CollectiveScope(const char* what, uint64_t members_id, Patience patience) noexcept
    : outer_what_(nullptr),
      outer_patience_(Patience::step),
      outer_members_(0),
      active_(watchdog().timeout_ns.load(std::memory_order_relaxed) > 0 ||
              watchdog().slow_timeout_ns.load(std::memory_order_relaxed) > 0) {
  if (!active_) return;
  Watchdog& w = watchdog();
  outer_what_ = w.what.load();
  outer_patience_ = static_cast<Patience>(w.patience.load());
  outer_members_ = w.members.load();
  w.publish(what, patience, members_id);
}

CollectiveScope::~CollectiveScope() {
  if (!active_) return;
  watchdog().publish(outer_what_, outer_patience_, outer_members_);  // null: outside any collective
}

}  // namespace echo::dist
