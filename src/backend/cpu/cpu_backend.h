// The CPU backend: the exact reference ops of backend/cpu (ops.h, quant/*.h) behind
// backend::Backend, on host tensors of f32 (training) or f64 (the gradient tests). Ops run
// synchronously; there is no stream.
#pragma once

#include "backend/backend.h"

namespace echo::backend {

class CpuBackend final : public Backend {
 public:
  // ranks_on_node: the ranks sharing this host's memory, reserve()'s multiplier.
  explicit CpuBackend(int ranks_on_node = 1);

  Device device() const override { return Device::cpu; }
  std::string name() const override { return "cpu"; }
  std::string device_model() const override { return "cpu"; }
  DType activation_dtype(DType master) const override { return master; }
  DType statistic_dtype(DType master) const override { return master; }

  Tensor empty(std::vector<int64_t> shape, DType dtype) override;
  void copy_from(Tensor& dst, const Tensor& src) override;
  Tensor to_host(const Tensor& src) override;
  void synchronize() override {}
  void raise_deferred_faults() override {}
  std::string memory_pool_note() const override { return {}; }
  size_t workspace_bytes(int64_t batch, int64_t seq, int64_t hidden, int64_t heads, int64_t kv_heads,
                         int64_t head_dim) const override;
  quant::Int8LinearScratch int8_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows, int64_t in,
                                              int64_t out, int64_t seq_len) const override;
  void reserve(size_t bytes, const std::string& what, const std::string& levers) override;
  size_t peak_bytes_in_use() const override { return host_memory_stats().peak; }

  void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
            Tensor& c) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                        Tensor& dw_accum) override;
  void rope_forward(Tensor& x, const Tensor& positions, double base) override;
  void rope_backward(Tensor& dx, const Tensor& positions, double base) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) override;
  void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) override;
  void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dtable_accum) override;
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                             const TpReducer& reducer, Tensor& lse, double divisor, Tensor& loss_acc) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t vocab_begin,
                              int32_t ignore_index, int64_t count, double dloss, Tensor& dlogits) override;
  void add_inplace(Tensor& y, const Tensor& x) override;
  void copy(Tensor& y, const Tensor& x) override;
  void cast(Tensor& y, const Tensor& x) override;
  void fill(Tensor& y, double value) override;
  void scale(Tensor& y, double factor) override;
  void adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const AdamWScalars& s) override;
  void accumulate_sum_squares(const Tensor& x, Tensor& acc) override;
  void accumulate_max_abs(const Tensor& x, Tensor& acc) override;
  void int8_linear_forward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Tensor& x,
                           const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved) override;
  void int8_linear_backward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Tensor& dy,
                            const quant::Int8LinearSaved& saved, Tensor* dx, bool accumulate_dx,
                            Tensor* dw_accum) override;

 private:
  int ranks_on_node_;
};

}  // namespace echo::backend
