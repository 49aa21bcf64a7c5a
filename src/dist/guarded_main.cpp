// guarded_main: exceptions become a logged error plus MPI_Abort (never a hang).
#include "dist/guarded_main.h"

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace echo::dist {

namespace {

// Seconds MPI_Init may take: ECHO_MPI_INIT_TIMEOUT_S, default 600; 0 waits for ever. A bad value
// is said and the default kept (no logger exists yet).
double mpi_init_timeout_s() {
  constexpr double kDefault = 600;
  const char* text = std::getenv("ECHO_MPI_INIT_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return kDefault;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*end == '\0' && std::isfinite(v) && v >= 0) return v;
  std::fprintf(stderr, "echo: ECHO_MPI_INIT_TIMEOUT_S='%s' is not a number of seconds >= 0; using %g\n", text,
               kDefault);
  return kDefault;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  // The collective watchdog (dist/collective_watchdog.h) starts after MPI_Init: a rank that never
  // reaches it (stopped or hung as it starts) left the others waiting inside it for ever (found by
  // a hostile audit: SIGSTOP of rank 1 50 ms after its spawn). This thread makes no MPI call.
  const double timeout_s = mpi_init_timeout_s();
  std::mutex mutex;
  std::condition_variable cv;
  bool initialised = false;
  std::thread watchdog;
  if (timeout_s > 0)
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mutex);
      if (cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return initialised; })) return;
      std::fprintf(stderr,
                   "echo: MPI_Init has not returned after %g s: another rank of the job did not start or stopped "
                   "while starting (stopped, hung, or its node unreachable); set ECHO_MPI_INIT_TIMEOUT_S to wait "
                   "longer (0: for ever)\n",
                   timeout_s);
      std::fflush(stderr);
      std::_Exit(1);  // mpirun then ends the job
    });
  int provided = 0;
  const int status = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    initialised = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  if (status != MPI_SUCCESS) {
    std::fprintf(stderr, "echo: MPI_Init_thread failed\n");
    std::exit(1);
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

static int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int guarded_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  MpiSession session(&argc, &argv);
  try {
    // Every program's log lines name their rank (a bench that never called init labelled each
    // rank's lines [rank 0/1]); a program may call init again with another level.
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    log::init(world_rank(), size);
    return body(argc, argv);
  } catch (const std::exception& e) {
    // NOTE: plain stderr, not the logger: the logger may be what failed, and this line must
    // reach the user before MPI_Abort tears the job down.
    std::fprintf(stderr, "[rank %d] error: %s\n", world_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace echo::dist
