// MPI shared-memory regions, the start-up probe and the per-group registry.
#include "comm/p2p/shm_workspace.h"

#include <sys/statvfs.h>

#include <cstring>
#include <exception>
#include <map>
#include <tuple>

#include "comm/p2p/peer_flags.h"
#include "dist/mpi_check.h"
#include "dist/world.h"

namespace echo::comm::p2p {

namespace {

constexpr uint64_t kProbe = 0xec40'5a3d'0000'0000ull;

// The live workspaces, per communicator and geometry.
using Key = std::tuple<MPI_Comm, int, int, size_t>;
std::map<Key, std::weak_ptr<ShmWorkspace>>& registry() {
  static std::map<Key, std::weak_ptr<ShmWorkspace>> live;
  return live;
}

}  // namespace

std::shared_ptr<ShmWorkspace> ShmWorkspace::for_group(const dist::Communicator& group, P2pGeometry geometry,
                                                      std::string* why) {
  geometry.ranks = group.size();
  const Key key{group.get(), geometry.ranks, geometry.tiles, geometry.slot_bytes};
  if (auto live = registry()[key].lock()) return live;
  auto fail = [&](std::string reason) -> std::shared_ptr<ShmWorkspace> {
    if (why) *why = std::move(reason);
    return nullptr;
  };

  // Same node? Every rank sees the same answer, but agree anyway.
  if (!group.all_ranks(dist::node_place(group).local_size == group.size()))
    return fail("the ranks of the group are not all on one node");

  // Open MPI backs the window with a file in /dev/shm: a window beyond its free space (a
  // container's 64 MiB /dev/shm) is "allocated" with a warning and then faults or spins when
  // touched, so ask first.
  const double need = static_cast<double>(geometry.region_bytes()) * group.size();
  struct statvfs fs {};
  const bool measured = ::statvfs("/dev/shm", &fs) == 0;
  const double free_bytes = measured ? static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) : need;
  if (!group.all_ranks(free_bytes >= need))
    return fail(
        fmt::format("the window needs {:.1f} MiB of /dev/shm, which has {:.1f} MiB free (a container may "
                    "need --shm-size)",
                    need / (1 << 20), free_bytes / (1 << 20)));

  std::shared_ptr<ShmWorkspace> ws(new ShmWorkspace());
  ws->table_ = RegionTable(geometry, group.rank());
  RegionTable& t = ws->table_;
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(geometry.region_bytes()), 1, MPI_INFO_NULL, group.get(),
                                         &base, &ws->win_);
  if (!group.all_ranks(rc == MPI_SUCCESS)) {
    if (rc == MPI_SUCCESS) MPI_Win_free(&ws->win_);
    ws->win_ = MPI_WIN_NULL;
    return fail(fmt::format("MPI_Win_allocate_shared of {} bytes per rank failed", geometry.region_bytes()));
  }
  // A window's errors abort the job by default. Some MPI layers refuse the shared query of a
  // window they allocated: Open MPI's monitoring component (mpirun --mca pml_monitoring_enable 1,
  // a byte counter) wraps the window and answers MPI_ERR_RMA_FLAVOR. That is a reason to take the
  // MPI path, not to die.
  MPI_CHECK(MPI_Win_set_errhandler(ws->win_, MPI_ERRORS_RETURN));
  std::string query_error;
  for (int p = 0; p < group.size() && query_error.empty(); ++p) {
    MPI_Aint size = 0;
    int disp = 0;
    void* ptr = nullptr;
    const int qrc = MPI_Win_shared_query(ws->win_, p, &size, &disp, &ptr);
    if (qrc != MPI_SUCCESS)
      query_error = fmt::format("MPI_Win_shared_query of rank {}'s region failed: {}", p, dist::mpi_error_string(qrc));
    else if (ptr == nullptr || static_cast<size_t>(size) < geometry.region_bytes())
      query_error = fmt::format("MPI_Win_shared_query gave rank {}'s region as {} bytes at {}", p, size, ptr);
    else
      t.set_region(p, static_cast<uint8_t*>(ptr));
  }
  if (!group.all_ranks(query_error.empty()))  // the destructor frees the window (unlocked)
    return fail(query_error.empty() ? "a peer could not map the shared-memory window" : query_error);
  MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, ws->win_));
  ws->locked_ = true;
  std::memset(base, 0, geometry.region_bytes());

  // The probe: a real write into every peer's region, read back by the peer.
  MPI_CHECK(MPI_Win_sync(ws->win_));
  group.barrier();
  const int me = group.rank();
  for (int p = 0; p < group.size(); ++p) publish(t.push_flag(p, 0, me), kProbe | static_cast<uint64_t>(me));
  MPI_CHECK(MPI_Win_sync(ws->win_));
  group.barrier();
  MPI_CHECK(MPI_Win_sync(ws->win_));
  bool ok = true;
  for (int s = 0; s < group.size(); ++s)
    ok = ok && observe(t.push_flag(me, 0, s)) == (kProbe | static_cast<uint64_t>(s));
  for (int s = 0; s < group.size(); ++s) publish(t.push_flag(me, 0, s), 0);
  MPI_CHECK(MPI_Win_sync(ws->win_));
  if (!group.all_ranks(ok)) return fail("the shared-memory probe read back wrong values");  // frees the window
  registry()[key] = ws;
  return ws;
}

ShmWorkspace::~ShmWorkspace() {
  if (win_ == MPI_WIN_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // NOTE: MPI_Win_free is collective. While an exception unwinds, the other ranks are not coming
  // (main aborts the job), so leave the window to the process's exit rather than hang in it.
  if (finalized || std::uncaught_exceptions() > 0) return;
  if (locked_) MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
}

}  // namespace echo::comm::p2p
