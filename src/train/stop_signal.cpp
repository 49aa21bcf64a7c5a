// Async-signal-safe stop flag.
#include "train/stop_signal.h"

#include <mpi.h>

#include <csignal>

#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::train {

namespace {
// NOTE: a signal handler can only touch a lock-free atomic of static storage; this is the one
// piece of process-wide state, and only StopSignal reads it.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_signal(int sig) { g_stop_signal = sig; }
using Handler = void (*)(int);
Handler g_previous_term = SIG_DFL, g_previous_int = SIG_DFL, g_previous_usr1 = SIG_DFL;
// Live StopSignal objects (only constructors and destructors touch it, never the handler): the
// outermost installs and restores, inner ones share its flag, so a signal caught during start-up
// (echo_train's own StopSignal) is still seen by the training loop's.
int g_depth = 0;
// Handlers installed by catch_stop_signals_from_exec and not yet taken over by a StopSignal.
bool g_installed_from_exec = false;

void install() {
  g_previous_term = std::signal(SIGTERM, on_signal);
  g_previous_int = std::signal(SIGINT, on_signal);
  g_previous_usr1 = std::signal(SIGUSR1, on_signal);
}
}  // namespace

void catch_stop_signals_from_exec() {
  if (g_depth > 0 || g_installed_from_exec) return;
  install();
  g_installed_from_exec = true;
}

StopSignal::StopSignal() {
  if (g_depth++ > 0) return;
  if (g_installed_from_exec) {  // keep what arrived before main()
    g_installed_from_exec = false;
    return;
  }
  g_stop_signal = 0;
  install();
}

StopSignal::~StopSignal() {
  if (--g_depth > 0) return;
  std::signal(SIGTERM, g_previous_term);
  std::signal(SIGINT, g_previous_int);
  std::signal(SIGUSR1, g_previous_usr1);
}

int StopSignal::received() const { return g_stop_signal; }

namespace {
bool any_signal(const dist::Communicator& world, const char* what, dist::Patience patience) {
  int local = g_stop_signal != 0 ? 1 : 0, any = 0;
  const dist::CollectiveScope watched(what, world, patience);
  MPI_CHECK(MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, world.get()));
  return any != 0;
}
}  // namespace

bool StopSignal::requested(const dist::Communicator& world) const {
  return any_signal(world, "the step's stop-signal check (MPI_Allreduce)", dist::Patience::step);
}

std::string StopSignal::what() const {
  const int sig = received();
  return sig != 0 ? "signal " + std::to_string(sig) : std::string("a signal to another rank");
}

bool StopSignal::requested_at_start_up(const dist::Communicator& world) const {
  return any_signal(world, "the start-up's stop-signal check (MPI_Allreduce)", dist::Patience::slow);
}

}  // namespace echo::train
