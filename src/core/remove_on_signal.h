// Removes a program's partial output files when SIGINT, SIGTERM or SIGHUP ends it. A tool that
// streams into PREFIX.bin.tmp (echo_prep) cleans up after an error through destructors, but the
// default action of Ctrl-C ends the process without running any: the partial files stayed
// behind. The handler unlinks the registered paths (unlink is async-signal-safe) and then lets
// the signal end the process as before (exit status 128 + signal). A signal the process ignores
// when the object is made (nohup's SIGHUP) is left ignored.
//
// A stretch of work that must not be cut in half (renaming finished files into place) runs
// inside a StopSignalsDeferred: a signal then waits until it ends. Worker threads are started
// inside one too, so they inherit the blocked mask and a signal always reaches the thread that
// defers.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace echo {

class RemoveOnSignal {
 public:
  // Installs the handlers; at most 8 paths of under 4096 bytes each.
  explicit RemoveOnSignal(const std::vector<std::string>& paths);
  // Unregisters the paths and restores the previous handlers.
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

  // From now on a signal removes nothing (the files became the finished output).
  void disarm() noexcept;

 private:
  struct sigaction previous_[3];
  bool installed_[3] = {};  // false: the signal was ignored, and stays so
};

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread for its lifetime; one that arrived meanwhile is delivered
// when it ends.
class StopSignalsDeferred {
 public:
  StopSignalsDeferred();
  ~StopSignalsDeferred();
  StopSignalsDeferred(const StopSignalsDeferred&) = delete;
  StopSignalsDeferred& operator=(const StopSignalsDeferred&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace echo
