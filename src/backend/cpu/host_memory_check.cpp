// The CPU backend's host-memory check (see host_memory_check.h).
#include "backend/cpu/host_memory_check.h"

#include <limits>

#include "core/error.h"
#include "core/tensor.h"

namespace echo::backend {

size_t host_bytes_needed(size_t plan_bytes, int ranks_on_node) {
  ECHO_CHECK(ranks_on_node >= 1, "ranks on the node must be at least 1, got {}", ranks_on_node);
  const size_t ranks = static_cast<size_t>(ranks_on_node);
  const size_t most = std::numeric_limits<size_t>::max();
  if (plan_bytes > most - kHostHeadroomPerRank) return most;
  const size_t per_rank = plan_bytes + kHostHeadroomPerRank;
  return per_rank > most / ranks ? most : per_rank * ranks;
}

void check_fits_host_memory(size_t plan_bytes, int ranks_on_node, size_t mem_available, const std::string& what,
                            const std::string& levers) {
  const size_t need = host_bytes_needed(plan_bytes, ranks_on_node);
  ECHO_INPUT_CHECK(need <= mem_available,
                   "{} does not fit in this host's memory: {} rank(s) on this node need {} x ({} + {} headroom for "
                   "the runtime) = {} ({} bytes), but MemAvailable is {} ({} bytes); {}, or fewer ranks per node, "
                   "needs less",
                   what, ranks_on_node, ranks_on_node, format_bytes(plan_bytes), format_bytes(kHostHeadroomPerRank),
                   format_bytes(need), need, format_bytes(mem_available), mem_available, levers);
}

}  // namespace echo::backend
