// SIGTERM / SIGINT (and SIGUSR1) ask the trainer to stop: the handler only sets a flag; the
// loop checks it after each step, agrees on it across ranks, saves a checkpoint and exits
// cleanly. NOTE: Open MPI's mpirun does not pass SIGTERM/SIGINT on gracefully (it kills the
// job), but it forwards SIGUSR1; schedulers (SLURM scancel) signal the ranks themselves.
#pragma once

#include <string>

#include "dist/communicator.h"

namespace echo::train {

// Installs the handlers for the lifetime of the object and restores the previous ones after.
// Objects nest: while one is alive, another shares its handlers and its flag (echo_train makes one
// before start-up, so a signal then is not fatal; the training loop's own sees it).
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Collective: true on every rank when any rank received a signal.
  bool requested(const dist::Communicator& world) const;
  // The same at the end of start-up, watched as a slow collective (comm.save_timeout_s): the
  // ranks arrive from loading and initialising, not from a step.
  bool requested_at_start_up(const dist::Communicator& world) const;
  // The signal number received by this process (0 if none).
  int received() const;
  // For the log: "signal N", or "a signal to another rank" when this process received none.
  std::string what() const;
};

// Installs the handlers at once, before main(): called from the executable's ELF .preinit_array
// (ECHO_CATCH_STOP_SIGNALS_FROM_EXEC below), which the dynamic loader runs before the
// initializers of the shared libraries. Those take about half a second in a CUDA build (cuBLASLt's
// static initialisation), and a signal then killed the rank. The first StopSignal takes the
// handlers over, with any signal caught so far; it restores the handlers found at exec.
void catch_stop_signals_from_exec();

}  // namespace echo::train

// In the file that defines main(), at namespace scope. Not under AddressSanitizer, whose runtime
// would have its signal interceptors called before it initialised itself.
#if defined(__SANITIZE_ADDRESS__)
#define ECHO_CATCH_STOP_SIGNALS_FROM_EXEC()
#else
#define ECHO_CATCH_STOP_SIGNALS_FROM_EXEC()                                                                \
  [[gnu::section(".preinit_array"), gnu::used]] static void (*const echo_catch_stop_signals_from_exec)() = \
      ::echo::train::catch_stop_signals_from_exec
#endif
