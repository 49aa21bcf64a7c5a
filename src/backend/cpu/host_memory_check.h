// The CPU backend's start-up check (Backend::reserve): a rank's training state, times the ranks
// sharing the host, must fit in the host's MemAvailable. Without it a plan too large for the host
// ran for most of a minute and ended in std::bad_alloc or the OOM killer.
#pragma once

#include <cstddef>
#include <string>

namespace echo::backend {

// What each rank needs beyond its plan: the binary and its libraries, MPI's shared-memory
// buffers, OpenBLAS's per-thread buffers and the heap's slack, none of which the plan counts.
inline constexpr size_t kHostHeadroomPerRank = size_t{256} << 20;

// ranks_on_node x (plan_bytes + kHostHeadroomPerRank), saturating instead of wrapping.
size_t host_bytes_needed(size_t plan_bytes, int ranks_on_node);

// Throws an echo::InputError, naming the per-rank plan (`what` describes it), the rank count,
// the total and MemAvailable and what to lower (`levers`, then fewer ranks per node), unless
// host_bytes_needed() <= mem_available.
void check_fits_host_memory(size_t plan_bytes, int ranks_on_node, size_t mem_available, const std::string& what,
                            const std::string& levers);

}  // namespace echo::backend
