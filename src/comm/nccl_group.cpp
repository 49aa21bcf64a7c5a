// NcclGroup (comm/nccl_group.h).
#include "comm/nccl_group.h"

#include <fmt/format.h>
#include <mpi.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "comm/nccl_check.h"
#include "comm/nccl_watch.h"
#include "cuda_check.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::comm {

struct NcclGroup::Impl {
  Impl(int ranks, uint64_t members_id) : watch(ranks, members_id) {}
  ncclComm_t comm = nullptr;
  NcclWatch watch;  // the collective watchdog's view of the calls in flight
};

NcclGroup::NcclGroup(const dist::Communicator& group)
    : impl_(std::make_unique<Impl>(group.size(), group.members_id())), size_(group.size()), rank_(group.rank()) {
  // Start-up's patience (comm.save_timeout_s): the peers may still be building their models.
  const dist::CollectiveScope watched("the NCCL communicator's set-up (ncclCommInitRank)", group, dist::Patience::slow);
  ncclUniqueId id;
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group.get()));
  NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
}

NcclGroup::~NcclGroup() {
  if (impl_ && impl_->comm) ncclCommDestroy(impl_->comm);  // NOTE: a destructor must not throw
}

void* NcclGroup::raw() const { return impl_->comm; }

std::shared_ptr<NcclGroup> NcclGroup::for_group(const dist::Communicator& group) {
  static std::mutex mutex;
  // NOTE: the size and rank are in the key too: an MPI_Comm handle freed and given again to
  // another communicator must not find the old group's NCCL communicator.
  static std::map<std::tuple<MPI_Comm, int, int, int>, std::weak_ptr<NcclGroup>> registry;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = registry[{group.get(), group.size(), group.rank(), device}];
  // The lookup is each rank's own: only a communicator every rank still holds is reused, so no
  // rank returns here while the others go on to ncclCommInitRank (which would wait for it forever).
  auto live = slot.lock();
  if (group.all_ranks(live != nullptr)) return live;
  auto made = std::make_shared<NcclGroup>(group);
  slot = made;
  return made;
}

namespace {
// Runs the calls `enqueue` makes between ncclGroupStart and ncclGroupEnd, and closes the group even
// when one of them fails (an open group would hold back every later NCCL call of this thread).
template <class F>
void nccl_group(F&& enqueue) {
  NCCL_CHECK(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  const char* failed = "";
  enqueue([&](ncclResult_t status, const char* what) {
    if (status != ncclSuccess && first == ncclSuccess) first = status, failed = what;
  });
  const ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) ECHO_FAIL("NCCL error in {}: {}", failed, ncclGetErrorString(first));
  NCCL_CHECK(end);
}

size_t total_bytes(const ByteExchange& layout) {
  size_t sum = 0;
  for (const auto c : layout.counts) sum += static_cast<size_t>(c);
  return sum;
}

void check_layout(const ByteExchange& layout, int size, const char* what) {
  ECHO_CHECK(layout.counts.size() == static_cast<size_t>(size) && layout.displs.size() == static_cast<size_t>(size),
             "NcclGroup: the {} layout has {} counts and {} displacements for {} ranks", what, layout.counts.size(),
             layout.displs.size(), size);
}
}  // namespace

void NcclGroup::all_reduce(void* data, size_t n, DType dtype, backend::ReduceOp op, cudaStream_t stream) {
  ncclDataType_t type = ncclFloat32;
  switch (dtype) {
    case DType::f32: type = ncclFloat32; break;
    case DType::bf16: type = ncclBfloat16; break;
    case DType::f64: type = ncclFloat64; break;
    case DType::i32: type = ncclInt32; break;
    default: ECHO_FAIL("NcclGroup::all_reduce: {} values are not reduced (f32, bf16, f64 or i32)", to_string(dtype));
  }
  impl_->watch.run("all-reduce", n, fmt::format("{} values", to_string(dtype)), stream, [&] {
    NCCL_CHECK(
        ncclAllReduce(data, data, n, type, op == backend::ReduceOp::max ? ncclMax : ncclSum, impl_->comm, stream));
  });
}

void NcclGroup::all_to_all_bytes(const uint8_t* send, const ByteExchange& send_layout, uint8_t* recv,
                                 const ByteExchange& recv_layout, cudaStream_t stream) {
  check_layout(send_layout, size_, "send");
  check_layout(recv_layout, size_, "receive");
  ECHO_CHECK(send_layout.counts[rank_] == recv_layout.counts[rank_],
             "NcclGroup: rank {} sends itself {} bytes but expects {}", rank_, send_layout.counts[rank_],
             recv_layout.counts[rank_]);
  // NOTE: a zero count is skipped on both sides alike (rank j's send count to me is my receive
  // count from j), so every send meets its receive.
  const auto own = static_cast<size_t>(send_layout.counts[rank_]);
  const size_t moved = total_bytes(send_layout) - own + total_bytes(recv_layout) - own;
  impl_->watch.run("all-to-all", moved, "bytes sent and received", stream, [&] {
    nccl_group([&](auto&& note) {
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        if (send_layout.counts[j] > 0)
          note(ncclSend(send + send_layout.displs[j], static_cast<size_t>(send_layout.counts[j]), ncclUint8, j,
                        impl_->comm, stream),
               "ncclSend");
        if (recv_layout.counts[j] > 0)
          note(ncclRecv(recv + recv_layout.displs[j], static_cast<size_t>(recv_layout.counts[j]), ncclUint8, j,
                        impl_->comm, stream),
               "ncclRecv");
      }
    });
  });
  if (send_layout.counts[rank_] > 0)
    CUDA_CHECK(cudaMemcpyAsync(recv + recv_layout.displs[rank_], send + send_layout.displs[rank_],
                               static_cast<size_t>(send_layout.counts[rank_]), cudaMemcpyDeviceToDevice, stream));
}

void NcclGroup::all_gather_bytes(const uint8_t* own, uint8_t* recv, const ByteExchange& gather, cudaStream_t stream) {
  check_layout(gather, size_, "gather");
  const auto own_bytes = static_cast<size_t>(gather.counts[rank_]);
  const size_t moved = total_bytes(gather);
  impl_->watch.run("all-gather", moved, "bytes", stream, [&] {
    nccl_group([&](auto&& note) {
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        if (own_bytes > 0) note(ncclSend(own, own_bytes, ncclUint8, j, impl_->comm, stream), "ncclSend");
        if (gather.counts[j] > 0)
          note(ncclRecv(recv + gather.displs[j], static_cast<size_t>(gather.counts[j]), ncclUint8, j, impl_->comm,
                        stream),
               "ncclRecv");
      }
    });
  });
  if (own_bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(recv + gather.displs[rank_], own, own_bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace echo::comm
