// The collectives a model issues over its tensor-parallel group:
//   block_site  the all-reduce after each row-parallel projection (forward) and on the gradient
//               of each block's normalized input (backward): Echo or exact, per config
//   exact_sum   the vocab-parallel embedding, the LM-head input gradient and the q_norm/k_norm
//               gradients: always an exact fp32/fp64 sum, identical on every rank
//   reducer     the max / sum reductions of the vocab-parallel cross-entropy and the INT8 scales
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "backend/tp_reducer.h"
#include "comm/all_reduce.h"
#include "comm/exact_all_reduce.h"
#include "core/config/config.h"
#include "dist/communicator.h"

namespace echo::model {

template <class T>
class TpOps {
 public:
  virtual ~TpOps() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void begin_pass(comm::Direction direction) = 0;
  // In place on a contiguous tensor of the backend's activation (block_site, edge_sum) or master
  // (exact_sum) dtype.
  virtual void block_site(Tensor& x, comm::Site site) = 0;
  virtual void exact_sum(Tensor& x) = 0;
  // The vocab-parallel embedding output and the LM-head input gradient (exact by default).
  virtual void edge_sum(Tensor& x, comm::Site site) {
    (void)site;
    exact_sum(x);
  }
  virtual const backend::TpReducer& reducer() const = 0;
  // A fault the all-reduces noted on the device without waiting (comm::AllReduce).
  virtual void raise_deferred_faults() {}
};

// What a rank handed to its tensor-parallel group: the bytes echo's all-reduces send
// (AllReduce::wire_bytes_per_rank: codes and group parameters, or bf16/fp32 values) and the
// payload of the scalar reductions (TpReducer: cross-entropy statistics, INT8 scales), whose
// movement MPI's algorithm decides (at tp = 2 each rank sends exactly the payload).
struct TpTraffic {
  uint64_t all_reduce_bytes = 0;
  uint64_t reduction_bytes = 0;
};

// fp32 model: block sites go through the configured all-reduce (exact or Echo); the embedding
// and LM-head sums through `edge` when given (comm.embedding_exact: false), else exactly; the
// q_norm/k_norm gradient sums always exactly (fp32); the reducer over MPI. The exact sums move over
// `transport` (comm.transport: on one node the shm workspace the block sites use, with the same
// bits as over MPI; MPI for the two-collective baseline). Where device is cuda and each rank drives
// its own GPU, the exact sums and the reducer's device half go over NCCL (the reducer's unless the
// transport is mpi, as for Echo's bytes), so tp > 1 does not wait for the GPU either. Make it after
// the backend has chosen the rank's GPU; collective over tp. Arguments must outlive this.
class CommTpOps final : public TpOps<float> {
 public:
  CommTpOps(const dist::Communicator& tp, comm::AllReduce& blocks, comm::AllReduce* edge = nullptr,
            config::Device device = config::Device::cpu, const comm::TransportOptions& transport = {});
  // The reducer's counting wrappers hold `this`: a moved or copied object would count elsewhere.
  CommTpOps(const CommTpOps&) = delete;
  CommTpOps& operator=(const CommTpOps&) = delete;
  int size() const override { return tp_.size(); }
  int rank() const override { return tp_.rank(); }
  void begin_pass(comm::Direction direction) override { blocks_.begin_pass(direction); }
  void block_site(Tensor& x, comm::Site site) override;
  void exact_sum(Tensor& x) override;
  void edge_sum(Tensor& x, comm::Site site) override;
  const backend::TpReducer& reducer() const override { return reducer_; }
  // The exact fp32 sums' all-reduce (its engine names the transport it took).
  const comm::AllReduce& exact_all_reduce() const { return *exact_; }
  // The traffic since the last call (the trainer's per-step tp_wire_bytes), and a fresh count.
  TpTraffic take_traffic() { return std::exchange(traffic_, {}); }
  void raise_deferred_faults() override {  // the embedding's edge site runs before the blocks
    raise_all({[&] {
                 if (edge_) edge_->raise_deferred_faults();
               },
               [&] { blocks_.raise_deferred_faults(); }});
  }

 private:
  const dist::Communicator& tp_;
  comm::AllReduce& blocks_;
  comm::AllReduce* edge_;
  std::unique_ptr<comm::AllReduce> exact_;
  backend::TpReducer reducer_;
  TpTraffic traffic_;
};

// Every collective an exact MPI sum in T (double for finite-difference and TP tests); with a
// single rank every collective is the identity and no MPI is touched.
template <class T>
class ExactTpOps final : public TpOps<T> {
 public:
  explicit ExactTpOps(const dist::Communicator* tp = nullptr);
  int size() const override;
  int rank() const override;
  void begin_pass(comm::Direction) override {}
  void block_site(Tensor& x, comm::Site) override { exact_sum(x); }
  void exact_sum(Tensor& x) override;
  const backend::TpReducer& reducer() const override { return reducer_; }

 private:
  const dist::Communicator* tp_;
  backend::TpReducer reducer_;
};

}  // namespace echo::model
