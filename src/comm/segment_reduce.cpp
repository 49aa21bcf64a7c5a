// Choosing the engine of the host all-reduces: shm on one node, MPI otherwise.
#include "comm/segment_reduce.h"

#include <mutex>
#include <set>
#include <string>

#include "comm/p2p/shm_pipelined_reduce.h"
#include "comm/two_phase_reduce.h"
#include "core/error.h"
#include "core/log.h"

namespace echo::comm {

size_t SegmentReduce::run_fused(std::span<float>, const SegmentCodec&, Site site, TileHooks&) {
  ECHO_FAIL("the {} transport cannot fuse the site's work into its pipeline (at {})", transport(), to_string(site));
}

std::unique_ptr<SegmentReduce> make_segment_reduce(const dist::Communicator& group, const TransportOptions& options) {
  if (options.kind == TransportKind::mpi || !options.pipelined || group.size() == 1)
    return std::make_unique<TwoPhaseReduce>(group);
  std::string why;
  auto ws = p2p::ShmWorkspace::for_group(group, options.geometry, &why);
  if (ws)
    return std::make_unique<p2p::ShmPipelinedReduce>(group, std::move(ws), options.peer_timeout_s, options.threads);
  // Said once per reason: a trainer's Echo, edge and exact all-reduces each ask for the group.
  static std::mutex said_mutex;
  static std::set<std::string> said;
  const std::string text = fmt::format(
      "comm.transport = {}: the shm transport is not possible for this group ({}); "
      "using mpi",
      options.kind == TransportKind::shm        ? "shm"
      : options.kind == TransportKind::cuda_ipc ? "cuda_ipc"
                                                : "auto",
      why);
  const std::lock_guard<std::mutex> lock(said_mutex);
  if (group.rank() == 0 && said.insert(text).second) {
    // A warning where the config asked for shm by name; auto falling back is routine (multi-node).
    const auto level = options.kind == TransportKind::shm ? spdlog::level::warn : spdlog::level::info;
    log::get("comm")->log(level, "{}", text);
  }
  return std::make_unique<TwoPhaseReduce>(group);
}

}  // namespace echo::comm
