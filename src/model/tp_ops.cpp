// TP collectives for the model over MPI.
#include "model/tp_ops.h"

#include <mpi.h>

#include "comm/make_all_reduce.h"
#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::model {

CommTpOps::CommTpOps(const dist::Communicator& tp, comm::AllReduce& blocks, comm::AllReduce* edge,
                     config::Device device, const comm::TransportOptions& transport)
    : tp_(tp),
      blocks_(blocks),
      edge_(edge),
      // NCCL between distinct GPUs, else the host engine over the transport (shm and MPI agree bit
      // for bit; shm_pipelined_reduce_mpi_test).
      exact_(comm::make_exact_all_reduce(tp, comm::ExactPrecision::fp32, device, transport)),
      // The identity at tp = 1, which lets a device backend keep the cross-entropy on the device.
      reducer_(tp.size() > 1 ? backend::make_mpi_reducer(tp) : backend::make_local_reducer()) {
  if (tp.size() == 1) return;
  reducer_.device = comm::make_device_tp_reduce(tp, device, transport.kind);
  // Count the reductions' payload where they are issued, whichever path carries them.
  const auto counted = [this](std::function<void(std::span<double>)> reduce) {
    return [this, reduce = std::move(reduce)](std::span<double> values) {
      traffic_.reduction_bytes += values.size_bytes();
      reduce(values);
    };
  };
  reducer_.max = counted(std::move(reducer_.max));
  reducer_.sum = counted(std::move(reducer_.sum));
  if (reducer_.device)
    reducer_.device = [this, reduce = std::move(reducer_.device)](void* data, int64_t n, DType dtype,
                                                                  backend::ReduceOp op, void* stream) {
      traffic_.reduction_bytes += static_cast<uint64_t>(n) * dtype_size(dtype);
      reduce(data, n, dtype, op, stream);
    };
}

void CommTpOps::block_site(Tensor& x, comm::Site site) {
  blocks_.all_reduce(x, site);
  if (tp_.size() > 1) traffic_.all_reduce_bytes += blocks_.wire_bytes_per_rank(x.numel(), site);
}

void CommTpOps::edge_sum(Tensor& x, comm::Site site) {
  if (!edge_) return exact_sum(x);
  edge_->begin_pass(site.direction);  // a single site: no compensator history to carry
  edge_->all_reduce(x, site);
  if (tp_.size() > 1) traffic_.all_reduce_bytes += edge_->wire_bytes_per_rank(x.numel(), site);
}

void CommTpOps::exact_sum(Tensor& x) {
  if (tp_.size() == 1) return;
  const comm::Site site{0, comm::Direction::forward};
  exact_->all_reduce(x, site);
  traffic_.all_reduce_bytes += exact_->wire_bytes_per_rank(x.numel(), site);
}

template <class T>
ExactTpOps<T>::ExactTpOps(const dist::Communicator* tp)
    : tp_(tp), reducer_(tp && tp->size() > 1 ? backend::make_mpi_reducer(*tp) : backend::make_local_reducer()) {}

template <class T>
int ExactTpOps<T>::size() const {
  return tp_ ? tp_->size() : 1;
}

template <class T>
int ExactTpOps<T>::rank() const {
  return tp_ ? tp_->rank() : 0;
}

template <class T>
void ExactTpOps<T>::exact_sum(Tensor& x) {
  if (size() == 1) return;
  ECHO_CHECK(x.is_cpu() && x.is_contiguous(), "ExactTpOps: the MPI sum needs a contiguous host tensor, got {}",
             x.describe());
  const MPI_Datatype type = sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT;
  const dist::CollectiveScope watched("the exact tensor-parallel sum over MPI", *tp_);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x.data<T>(), static_cast<int>(x.numel()), type, MPI_SUM, tp_->get()));
}

template class ExactTpOps<float>;
template class ExactTpOps<double>;

}  // namespace echo::model
