// cudaMalloc'd regions, the IPC handle exchange, the start-up probe and the per-group registry.
// NOTE: never run on a GPU when written; cuda_ipc_reduce_gpu_mpi_test checks it.
#include "comm/p2p/cuda_ipc_workspace.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <tuple>
#include <vector>

#include "core/log.h"
#include "cuda_check.h"
#include "dist/mpi_check.h"
#include "dist/world.h"
#include "p2p_flags.cuh"

namespace echo::comm::p2p {

namespace {

constexpr uint64_t kProbe = 0xec40'1dc0'0000'0000ull;

// A failed runtime call as text (and the sticky error cleared), for the fallback's log line.
bool cuda_ok(cudaError_t status, const char* what, std::string& error) {
  if (status == cudaSuccess) return true;
  if (error.empty()) error = fmt::format("{}: {}", what, cudaGetErrorString(status));
  cudaGetLastError();
  return false;
}

// "" when every peer's GPU is this rank's own or one it can access directly (cudaDeviceCanAccessPeer);
// otherwise why not. GPUs are matched by UUID, since a device number means nothing in another
// process (CUDA_VISIBLE_DEVICES may differ). Collective over the group (an MPI_Allgather); a
// failed runtime call is this rank's reason, not an exception, so every rank reaches the vote.
std::string peer_access_problem(const dist::Communicator& group, int device) {
  std::string error;
  cudaDeviceProp prop{};
  const bool have_uuid = cuda_ok(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", error);
  std::vector<cudaUUID_t> uuids(static_cast<size_t>(group.size()));
  MPI_CHECK(
      MPI_Allgather(&prop.uuid, sizeof(cudaUUID_t), MPI_BYTE, uuids.data(), sizeof(cudaUUID_t), MPI_BYTE, group.get()));
  if (!have_uuid) return error;
  const auto same = [](const cudaUUID_t& x, const cudaUUID_t& y) { return std::memcmp(x.bytes, y.bytes, 16) == 0; };
  int count = 0;
  if (!cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount", error)) return error;
  std::vector<cudaUUID_t> visible(static_cast<size_t>(count));  // this process's devices, by ordinal
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp other{};
    if (!cuda_ok(cudaGetDeviceProperties(&other, d), "cudaGetDeviceProperties", error)) return error;
    visible[static_cast<size_t>(d)] = other.uuid;
  }
  const cudaUUID_t unknown{};  // what a rank that could not read its own sent
  for (int p = 0; p < group.size(); ++p) {
    const cudaUUID_t& theirs = uuids[static_cast<size_t>(p)];
    if (same(theirs, unknown)) return fmt::format("rank {} could not read its GPU's properties", p);
    if (same(theirs, prop.uuid)) continue;
    const auto at = std::find_if(visible.begin(), visible.end(), [&](const cudaUUID_t& u) { return same(u, theirs); });
    if (at == visible.end())
      return fmt::format("rank {}'s GPU is not visible to rank {} (CUDA_VISIBLE_DEVICES differs between them?)", p,
                         group.rank());
    const int ordinal = static_cast<int>(at - visible.begin());
    int can = 0;
    if (!cuda_ok(cudaDeviceCanAccessPeer(&can, device, ordinal), "cudaDeviceCanAccessPeer", error)) return error;
    if (!can)
      return fmt::format("GPU {} (rank {}) cannot access GPU {} (rank {}) directly: no peer-to-peer path between them",
                         device, group.rank(), ordinal, p);
  }
  return "";
}

using Key = std::tuple<MPI_Comm, int, int, size_t, int>;
std::map<Key, std::weak_ptr<CudaIpcWorkspace>>& registry() {
  static std::map<Key, std::weak_ptr<CudaIpcWorkspace>> live;
  return live;
}

}  // namespace

std::shared_ptr<CudaIpcWorkspace> CudaIpcWorkspace::for_group(const dist::Communicator& group, P2pGeometry geometry,
                                                              std::string* why) {
  geometry.ranks = group.size();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const Key key{group.get(), geometry.ranks, geometry.tiles, geometry.slot_bytes, device};
  // NOTE: the lookup is each rank's own; only a workspace every rank still holds is reused, so
  // no rank returns here while the others go on to the collective creation below.
  std::shared_ptr<CudaIpcWorkspace> live = registry()[key].lock();
  if (group.all_ranks(live != nullptr)) return live;
  auto fail = [&](std::string reason) -> std::shared_ptr<CudaIpcWorkspace> {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  if (group.size() > cuda::kMaxP2pPeers)
    return fail(fmt::format("the group has {} ranks, more than the {} the cuda_ipc transport serves", group.size(),
                            cuda::kMaxP2pPeers));
  if (!group.all_ranks(dist::node_place(group).local_size == group.size()))
    return fail("the ranks of the group are not all on one node");

  // Distinct GPUs must reach each other's memory directly: the stage kernels load and store to
  // peer memory, and a store over a link without peer access is a sticky fault that ends the
  // process's CUDA context, not an error the fallback could recover from. So ask first.
  if (std::string reason = peer_access_problem(group, device); !group.all_ranks(reason.empty())) {
    // Only rank 0 logs the fallback's reason: a rank that found the problem says it here.
    if (!reason.empty()) ECHO_WARN("comm", "rank {} of the cuda_ipc group: {}", group.rank(), reason);
    return fail(reason.empty() ? std::string("another rank's GPU cannot be reached directly (its warning names it)")
                               : reason);
  }

  std::shared_ptr<CudaIpcWorkspace> ws(new CudaIpcWorkspace());
  MPI_CHECK(MPI_Comm_dup(group.get(), &ws->comm_));
  ws->table_ = RegionTable(geometry, group.rank());
  RegionTable& t = ws->table_;
  const int me = group.rank();
  std::string error;

  // Allocate and zero the own region; export it.
  cudaIpcMemHandle_t handle{};
  void* base = nullptr;
  // NOTE: a whole number of 2 MiB pages: cudaMalloc may carve a small allocation out of a larger
  // block, and IPC then exports the whole block (the CUDA Programming Guide, "Interprocess
  // Communication", advises sharing 2 MiB-aligned sizes only).
  constexpr size_t kIpcGranule = size_t{2} << 20;
  const size_t bytes = (geometry.region_bytes() + kIpcGranule - 1) / kIpcGranule * kIpcGranule;
  bool ok = cuda_ok(cudaMalloc(&base, bytes), "cudaMalloc", error);
  if (ok) {
    ws->own_ = static_cast<uint8_t*>(base);
    ok = cuda_ok(cudaMemset(base, 0, bytes), "cudaMemset", error) &&
         cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error) &&
         cuda_ok(cudaIpcGetMemHandle(&handle, base), "cudaIpcGetMemHandle", error);
  }
  std::vector<cudaIpcMemHandle_t> handles(static_cast<size_t>(group.size()));
  MPI_CHECK(MPI_Allgather(&handle, sizeof handle, MPI_BYTE, handles.data(), sizeof handle, MPI_BYTE, group.get()));
  if (!group.all_ranks(ok))
    return fail(fmt::format("allocating or exporting the {}-byte region failed ({})", geometry.region_bytes(),
                            error.empty() ? "on another rank" : error));

  // Open every peer's region.
  t.set_region(me, ws->own_);
  for (int p = 0; p < group.size() && ok; ++p) {
    if (p == me) continue;
    void* peer = nullptr;
    ok = cuda_ok(cudaIpcOpenMemHandle(&peer, handles[static_cast<size_t>(p)], cudaIpcMemLazyEnablePeerAccess),
                 "cudaIpcOpenMemHandle", error);
    if (ok) {
      ws->opened_.push_back(static_cast<uint8_t*>(peer));
      t.set_region(p, static_cast<uint8_t*>(peer));
    }
  }
  if (!group.all_ranks(ok))
    return fail(fmt::format("opening the peers' IPC handles failed ({})", error.empty() ? "on another rank" : error));

  // The probe: a real write into every peer's region, read back by the peer. A kernel's store,
  // as the stages make, not a cudaMemcpy, which the driver may stage through the host.
  {
    cuda::P2pFlagList probe;
    probe.count = group.size();
    for (int p = 0; p < group.size(); ++p) probe.flag[p] = t.push_flag(p, 0, me);
    void* record = nullptr;  // p2p_publish reads a fault record: a zeroed one, so none
    ok = cuda_ok(cudaMalloc(&record, sizeof(cuda::P2pFaultRecord)), "probe record", error) &&
         cuda_ok(cudaMemset(record, 0, sizeof(cuda::P2pFaultRecord)), "probe record", error);
    if (ok) {
      try {  // a failed launch throws; here it must become this rank's vote, not skip the votes
        cuda::p2p_publish(probe, kProbe | static_cast<uint64_t>(me), static_cast<cuda::P2pFaultRecord*>(record),
                          nullptr);
      } catch (const std::exception& e) {
        ok = false;
        error = fmt::format("probe write: {}", e.what());
        cudaGetLastError();
      }
    }
    ok = ok && cuda_ok(cudaDeviceSynchronize(), "probe write", error);
    if (record != nullptr) cudaFree(record);
  }
  group.barrier();
  std::vector<uint64_t> seen(static_cast<size_t>(group.size()), 0);
  ok = ok &&
       cuda_ok(cudaMemcpy(seen.data(), t.push_flag(me, 0, 0), seen.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
               "probe read", error);
  for (int s = 0; s < group.size() && ok; ++s) ok = seen[static_cast<size_t>(s)] == (kProbe | static_cast<uint64_t>(s));
  ok = ok && cuda_ok(cudaMemset(t.push_flag(me, 0, 0), 0, seen.size() * sizeof(uint64_t)), "probe reset", error) &&
       cuda_ok(cudaDeviceSynchronize(), "probe reset", error);
  group.barrier();
  if (!group.all_ranks(ok))
    return fail(error.empty() ? std::string("the IPC probe read back wrong values")
                              : "the IPC probe failed (" + error + ")");
  registry()[key] = ws;
  return ws;
}

void CudaIpcWorkspace::release() {
  for (uint8_t* p : opened_) cudaIpcCloseMemHandle(p);
  opened_.clear();
  // NOTE: the owner frees its region only after every peer closed its mapping of it.
  if (comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);
  if (own_ != nullptr) cudaFree(own_);
  own_ = nullptr;
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

CudaIpcWorkspace::~CudaIpcWorkspace() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // NOTE: the barrier is collective. While an exception unwinds the other ranks are not coming
  // (main aborts the job), so leave the memory to the process's exit rather than hang.
  if (finalized || std::uncaught_exceptions() > 0) return;
  release();
}

}  // namespace echo::comm::p2p
