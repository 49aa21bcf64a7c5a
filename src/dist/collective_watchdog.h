// A watchdog for the MPI collectives of a training step (docs/design.md §3, "Stuck peers"). MPI
// has no timeout: a peer that is stopped, deadlocked or stuck on its device leaves every other
// rank blocked in the next collective for ever. Like PyTorch's NCCL watchdog, a thread watches
// the collective this rank is in; one that has lasted longer than the timeout ends the process
// with an error naming it, and mpirun then ends the job. The shm transport's own waits time out
// by themselves (comm.peer_timeout_s); this covers the MPI calls around and instead of them.
//
// Off until set_collective_timeout() is called (echo_train does, with comm.peer_timeout_s);
// while off a scope costs one relaxed atomic load. Scopes are for collectives a step makes,
// whose peers arrive within a step's compute, not for start-up or checkpoint barriers, where a
// peer may legitimately be busy (rank 0 writing a large checkpoint) for longer.
#pragma once

#include <functional>
#include <string>

namespace echo::dist {

// Starts the watchdog thread the first time; 0 turns the watch off. `rank` names this process in
// the message. Not thread-safe against running scopes of another thread: call it at start-up.
void set_collective_timeout(double seconds, int rank);

// What the watchdog does with its message when a collective overruns. By default it writes it to
// stderr and ends the process (std::_Exit(1)): the main thread is blocked inside MPI, so nothing
// can be thrown there. Tests replace it.
void set_collective_timeout_handler(std::function<void(const std::string& message)> handler);

// Marks the calling thread as inside one collective for its lifetime. `what` names it in the
// message and must outlive the scope (a string literal). Scopes nest: an inner one is watched
// from its own start, and the outer one again from the inner one's end.
class CollectiveScope {
 public:
  explicit CollectiveScope(const char* what) noexcept;
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  const char* outer_what_;
  bool active_;
};

}  // namespace echo::dist
