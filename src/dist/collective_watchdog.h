// A watchdog for the MPI collectives of a training step (docs/design.md §3, "Stuck peers"). MPI
// has no timeout: a peer that is stopped, deadlocked or stuck on its device leaves every other
// rank blocked in the next collective for ever. Like PyTorch's NCCL watchdog, a thread watches
// the collective this rank is in; one that has lasted longer than the timeout ends the process
// with an error naming it, and mpirun then ends the job. The shm transport's own waits time out
// by themselves (comm.peer_timeout_s); this covers the MPI calls around and instead of them.
//
// Two limits, because two kinds of collective differ in how long a healthy peer may take to
// arrive. A step's collectives (Patience::step) wait out a step's compute at most: they are timed
// against comm.peer_timeout_s. Start-up, agreements and checkpoint saves and loads
// (Patience::slow) may wait for a peer that is legitimately busy far longer (rank 0 writing a
// large checkpoint to a slow disk, reading the one to resume): they are timed against the
// generous comm.save_timeout_s, so a rank stopped there still ends the job, only later.
//
// Off until set_collective_timeout() or set_slow_collective_timeout() is called (echo_train
// calls both at the start of the Trainer's construction); while off a scope costs two relaxed
// atomic loads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace echo::dist {

class Communicator;

// How long a peer may legitimately take to arrive at a collective: a step's compute (step), or
// a checkpoint write, a checkpoint read or start-up's work (slow).
enum class Patience { step, slow };

// The limit of step scopes (comm.peer_timeout_s). Starts the watchdog thread the first time; 0
// turns the watch of step scopes off. `rank` names this process in the message. Not thread-safe
// against running scopes of another thread: call it at start-up.
void set_collective_timeout(double seconds, int rank);

// The limit of slow scopes (comm.save_timeout_s); 0 (the default) leaves them unwatched. Starts
// the thread like set_collective_timeout(); the rank in the message is the one that set.
void set_slow_collective_timeout(double seconds);

// Collective over MPI_COMM_WORLD: the ranks on each node share where each one is
// (dist/node_progress_board.h), and from then on a timeout's message names the rank on this node
// that holds the collective up (gone, stopped, not running, outside any collective) instead of
// "a peer rank", or says that every rank here waits and the stalled one is on another node.
// Without shared memory (each rank logs why) the message stays as it was. Call it at start-up;
// a later call on every rank does nothing.
void watch_peers_on_node();

// For other waits on a peer (the shm transport's flags): "rank r (pid p) is stopped (...)" when
// watch_peers_on_node() was called and world rank `world_rank` runs on this node with its process
// gone, stopped or not running; "" otherwise.
std::string describe_peer_process(int world_rank);

// The training step (1-based) the calling loop is in, named in the message ("... at step 12");
// 0 (the default) names none: start-up, or a program that is not a trainer.
void set_collective_step(int64_t step);

// What the watchdog does with its message when a collective overruns. By default it writes it to
// stderr and ends the process (std::_Exit(1)): the main thread is blocked inside MPI, so nothing
// can be thrown there. Tests replace it.
void set_collective_timeout_handler(std::function<void(const std::string& message)> handler);

// Collectives a device runs on its own (NCCL calls enqueued on a stream): the host goes on at once,
// so no CollectiveScope brackets the wait; a peer that never joins leaves the device, and the host
// at its next wait on the device, blocked for ever. A probe (comm/nccl_watch.h) names the oldest
// call its device has reached and not finished. A thread of its own asks every probe at each look
// and, like a step scope, ends the rank when one has lasted longer than comm.peer_timeout_s,
// timed from the first look that found the device in it, less the time this process was stopped.
// Like PyTorch's NCCL watchdog, on CUDA events; unlike it, the time queued behind this GPU's
// earlier work does not count.
struct PendingDeviceCollective {
  uint64_t id = 0;   // 0: none (nothing pending, or the device has not reached the oldest call yet)
  std::string what;  // the call: "NCCL all-reduce of 4096 bf16 values over 2 ranks"
  int64_t step = 0;  // the training step it was enqueued in; 0: none
};
using DeviceCollectiveProbe = std::function<PendingDeviceCollective()>;
// Registers a probe (called on the device watch thread, under a lock: it must not block) and
// returns its handle. The first one starts that thread.
uint64_t add_device_collective_probe(DeviceCollectiveProbe probe);
// Unregisters it; once this returns the probe is not running and never runs again.
void remove_device_collective_probe(uint64_t handle);
// Whether step scopes, and so device collectives, are watched (comm.peer_timeout_s set and > 0).
bool device_collectives_watched();
// The step set_collective_step() set last.
int64_t collective_step();

// Marks the calling thread as inside one collective for its lifetime. `what` names it in the
// message and must outlive the scope (a string literal); `comm` is the communicator it runs on
// (a timeout's message judges only ranks waiting on the same one as being in "the same" or "a
// different" collective); `patience` picks its limit. Scopes nest: an inner one is watched from
// its own start against its own limit, and the outer one again, against the outer's limit, from
// the inner one's end.
class CollectiveScope {
 public:
  CollectiveScope(const char* what, const Communicator& comm, Patience patience = Patience::step) noexcept;
  // The same with the communicator's members_id() (a caller that keeps only the MPI handle), or
  // kUnknownMembers (a program without communicators: tests).
  static constexpr uint64_t kUnknownMembers = 0;
  CollectiveScope(const char* what, uint64_t members_id, Patience patience = Patience::step) noexcept;
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  const char* outer_what_;
  Patience outer_patience_;
  uint64_t outer_members_;
  bool active_;
};

}  // namespace echo::dist
