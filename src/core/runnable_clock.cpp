#include "core/runnable_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace echo {

RunnableClock::RunnableClock() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}

RunnableClock::~RunnableClock() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t RunnableClock::read() const {
  if (fd_ < 0) return -1;
  // "<ns on a CPU> <ns runnable, waiting for one> <time slices>\n"; each read at offset 0 is
  // a fresh snapshot.
  char text[96];
  const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  int64_t on_cpu = 0, waiting = 0;
  if (std::sscanf(text, "%" SCNd64 " %" SCNd64, &on_cpu, &waiting) != 2 || on_cpu < 0 || waiting < 0) return -1;
  return on_cpu + waiting;
}

}  // namespace echo
