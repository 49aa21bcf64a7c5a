// Latency statistics across iterations: each iteration's time is the slowest rank's, as a
// collective is only done when every rank is; the table reports median, p10 and p90.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace echo::bench {

struct LatencyStats {
  double median_us = 0, p10_us = 0, p90_us = 0;
};

inline LatencyStats summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.1), at(0.9)};
}

// prepare() runs untimed before every call (e.g. restoring the input), call() is timed.
inline LatencyStats time_collective(MPI_Comm comm, int warmup, int iters, const std::function<void()>& prepare,
                                    const std::function<void()>& call, const std::function<void()>& after_warmup = {}) {
  std::vector<double> samples;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup && after_warmup) after_warmup();  // e.g. reset counters that should see the timed calls only
    prepare();
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    call();
    double local = (MPI_Wtime() - t0) * 1e6, slowest = 0;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (i >= warmup) samples.push_back(slowest);
  }
  return summarize(std::move(samples));
}

}  // namespace echo::bench
