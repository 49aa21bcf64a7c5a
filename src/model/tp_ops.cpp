// TP collectives for the model over MPI.
#include "model/tp_ops.h"

#include <mpi.h>

#include "comm/make_all_reduce.h"
#include "core/error.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"

namespace echo::model {

CommTpOps::CommTpOps(const dist::Communicator& tp, comm::AllReduce& blocks, comm::AllReduce* edge,
                     config::Device device, comm::TransportKind transport)
    : tp_(tp),
      blocks_(blocks),
      edge_(edge),
      // NCCL between distinct GPUs, else the host engine over MPI (the same bits as over shm).
      exact_(comm::make_exact_all_reduce(tp, comm::ExactPrecision::fp32, device)),
      // The identity at tp = 1, which lets a device backend keep the cross-entropy on the device.
      reducer_(tp.size() > 1 ? backend::make_mpi_reducer(tp) : backend::make_local_reducer()) {
  if (tp.size() > 1) reducer_.device = comm::make_device_tp_reduce(tp, device, transport);
}

void CommTpOps::edge_sum(Tensor& x, comm::Site site) {
  if (!edge_) return exact_sum(x);
  edge_->begin_pass(site.direction);  // a single site: no compensator history to carry
  edge_->all_reduce(x, site);
}

void CommTpOps::exact_sum(Tensor& x) {
  if (tp_.size() > 1) exact_->all_reduce(x, {0, comm::Direction::forward});
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
  const dist::CollectiveScope watched("the exact tensor-parallel sum over MPI");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x.data<T>(), static_cast<int>(x.numel()), type, MPI_SUM, tp_->get()));
}

template class ExactTpOps<float>;
template class ExactTpOps<double>;

}  // namespace echo::model
