// CudaBackend: the kernels of kernels/ (ops.cuh, gemm.cuh, attention.cuh) behind backend::Backend.
//
// One blocking stream per backend: work is ordered on it, and the synchronous copies of
// core/tensor.h (legacy default stream) order with it too, which the host-staged collectives rely
// on (comm/all_reduce.cpp). Memory: tensors come from the device's stream-ordered pool
// (cudaMallocAsync) with its release threshold raised so freed blocks stay cached, which makes
// the per-step activations cost no cudaMalloc after the first step; running out names the bytes
// asked for and those free (the start-up arena sized in advance is planned, docs/design.md §16).
// The INT8 S3R-EC linear is kernels/int8_linear.cuh (bf16
// activations, the f32 master weight, f32 dW).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention.cuh"
#include "core/error.h"
#include "core/log.h"
#include "cuda_check.h"
#include "gemm.cuh"
#include "int8_linear.cuh"
#include "ops.cuh"
#include "pool_tensor.cuh"

namespace echo::backend {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    CUDA_CHECK(cudaSetDevice(device));
    // NOTE: a blocking stream (not cudaStreamNonBlocking): the legacy-stream copies of Tensor order with it.
    CUDA_CHECK(cudaStreamCreate(&stream_));
    // Keep freed blocks in the pool instead of returning them to the driver at every sync.
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    gemm_ = std::make_unique<cuda::GemmContext>();
    gemm_->on_fallback([](const std::string& problem) { ECHO_WARN("backend", "{}", problem); });
    faults_ = std::make_unique<cuda::DeferredFaults>();
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (Staging& s : staging_) {  // NOTE: a destructor must not throw
      cudaFreeHost(s.host);
      cudaEventDestroy(s.done);
    }
    gemm_.reset();
    faults_.reset();
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string name() const override { return fmt::format("cuda:{}", device_); }
  std::string device_model() const override {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    return prop.name;
  }
  DType activation_dtype(DType master) const override {
    ECHO_CHECK(master == DType::f32, "the CUDA backend trains fp32 master weights, got {}", master);
    return DType::bf16;
  }
  DType statistic_dtype(DType master) const override {
    (void)master;
    return DType::f32;
  }

  Tensor empty(std::vector<int64_t> shape, DType dtype) override {
    return cuda::pool_tensor(std::move(shape), dtype, stream_, levers_);
  }
  void copy_from(Tensor& dst, const Tensor& src) override {
    // Small uploads (a batch's tokens) go without a wait; large ones (weights at start-up or after
    // a load) take the plain copy rather than pinning that much host memory.
    if (dst.is_cuda() && src.is_cpu() && dst.is_contiguous() && src.is_contiguous() && dst.dtype() == src.dtype() &&
        dst.numel() == src.numel() && dst.numel() > 0 && src.nbytes() <= kMaxStagedBytes) {
      upload(dst, src);
      return;
    }
    dst.copy_from(src);
  }
  Tensor to_host(const Tensor& src) override { return src.to(Device::cpu); }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void raise_deferred_faults() override { faults_->raise_if_any(stream_); }
  size_t workspace_bytes(int64_t batch, int64_t seq, int64_t hidden, int64_t heads, int64_t kv_heads,
                         int64_t head_dim) const override {
    // The attention workspace is kept (attention_workspace()); an RMSNorm backward's partial sums
    // live during its call, while that workspace is held: the largest of the hidden norms' and
    // the q / k norms' (a row per head).
    const int64_t n = batch * seq;
    return cuda::attention_workspace_bytes(batch, seq, heads, kv_heads, head_dim, DType::bf16) +
           std::max({cuda::rmsnorm_backward_scratch_bytes(n, hidden),
                     cuda::rmsnorm_backward_scratch_bytes(n * heads, head_dim),
                     cuda::rmsnorm_backward_scratch_bytes(n * kv_heads, head_dim)});
  }
  quant::Int8LinearScratch int8_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows, int64_t in,
                                              int64_t out, int64_t seq_len) const override {
    return cuda::int8_linear_scratch_bytes(cfg, rows, in, out, seq_len);
  }
  void reserve(size_t bytes, const std::string& what, const std::string& levers) override {
    levers_ = levers;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    ECHO_INPUT_CHECK(bytes + kHeadroom <= free_bytes,
                     "{} does not fit on {}: it needs {} bytes ({}) plus {} for cuBLASLt, NCCL and the "
                     "runtime, and {} of {} bytes are free; {} needs less",
                     what, name(), bytes, format_bytes(bytes), format_bytes(kHeadroom), free_bytes, total_bytes,
                     levers);
    // One allocation of the whole plan, freed at once: with the release threshold raised the
    // pool keeps it, and the tensors of step 1 are carved from it (peak_bytes_in_use and the
    // pool's reserved size in the log show whether it had to grow).
    if (bytes == 0) return;  // cudaMallocAsync of 0 bytes gives no pointer to free
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_));
    CUDA_CHECK(cudaFreeAsync(p, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    reserved_ = pool_attribute(cudaMemPoolAttrReservedMemCurrent);
  }
  std::string memory_pool_note() const override {
    const uint64_t high = pool_attribute(cudaMemPoolAttrReservedMemHigh);
    if (reserved_ == 0) return fmt::format("; the memory pool holds at most {}", format_bytes(high));
    return high <= reserved_
               ? fmt::format("; served from the start-up reservation of {} (the pool never grew)",
                             format_bytes(reserved_))
               : fmt::format("; the memory pool grew from the start-up reservation of {} to {}",
                             format_bytes(reserved_), format_bytes(high));
  }
  size_t peak_bytes_in_use() const override {
    return static_cast<size_t>(pool_attribute(cudaMemPoolAttrUsedMemHigh));
  }

  void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
            Tensor& c) override {
    if (c.dtype() == DType::f32 && a.dtype() == DType::bf16) {
      // bf16 operands into an fp32 result (the weight gradients): the batched form serves the mix.
      cuda::gemm_batched(*gemm_, trans_a, trans_b, 1, alpha, a, 0, b, 0, beta, c, 0, stream_);
      return;
    }
    cuda::gemm(*gemm_, trans_a, trans_b, alpha, a, b, beta, c, stream_);
  }
  void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd) override {
    cuda::rmsnorm_forward(x, w, eps, out, rstd, stream_);
  }
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                        Tensor& dw_accum) override {
    cuda::rmsnorm_backward(dout, x, w, rstd, dx, dw_accum, stream_);
  }
  void rope_forward(Tensor& x, const Tensor& positions, double base) override {
    cuda::rope_forward(x, positions, base, stream_);
  }
  void rope_backward(Tensor& dx, const Tensor& positions, double base) override {
    cuda::rope_backward(dx, positions, base, stream_);
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) override {
    cuda::attention_forward(*gemm_, q, k, v, out, lse, attention_workspace(q, k), stream_);
  }
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) override {
    cuda::attention_backward(*gemm_, dout, q, k, v, out, lse, dq, dk, dv, attention_workspace(q, k), stream_);
  }
  void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) override {
    cuda::swiglu_forward(gate, up, out, stream_);
  }
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) override {
    cuda::swiglu_backward(dout, gate, up, dgate, dup, stream_);
  }
  void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out) override {
    cuda::embedding_forward(tokens, table, vocab_begin, out, stream_);
  }
  void embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                          Tensor& dtable_accum) override {
    cuda::embedding_backward(tokens, dout, vocab_begin, dtable_accum, stream_);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                             const TpReducer& reducer, Tensor& lse, double divisor, Tensor& loss_acc) override {
    cuda::cross_entropy_accumulate(logits, targets, vocab_begin, ignore_index, reducer, lse, divisor, loss_acc,
                                   stream_);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t vocab_begin,
                              int32_t ignore_index, int64_t count, double dloss, Tensor& dlogits) override {
    cuda::cross_entropy_backward(logits, targets, lse, vocab_begin, ignore_index, count, dloss, dlogits, stream_);
  }
  void add_inplace(Tensor& y, const Tensor& x) override { cuda::add_inplace(y, x, stream_); }
  void copy(Tensor& y, const Tensor& x) override { cuda::copy(y, x, stream_); }
  void cast(Tensor& y, const Tensor& x) override { cuda::cast(y, x, stream_); }
  void fill(Tensor& y, double value) override { cuda::fill(y, value, stream_); }
  void scale(Tensor& y, double factor) override { cuda::scale(y, factor, stream_); }
  void adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const AdamWScalars& s) override {
    cuda::adamw_step(w, g, m, v, decay, s, stream_);
  }
  void accumulate_sum_squares(const Tensor& x, Tensor& acc) override { cuda::accumulate_sum_squares(x, acc, stream_); }
  void accumulate_max_abs(const Tensor& x, Tensor& acc) override { cuda::accumulate_max_abs(x, acc, stream_); }
  void int8_linear_forward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Tensor& x,
                           const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved) override {
    cuda::int8_linear_forward(*gemm_, cfg, ctx, x, w, y, saved, stream_, faults_.get());
  }
  void int8_linear_backward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Tensor& dy,
                            const quant::Int8LinearSaved& saved, Tensor* dx, bool accumulate_dx,
                            Tensor* dw_accum) override {
    cuda::int8_linear_backward(*gemm_, cfg, ctx, dy, saved, dx, accumulate_dx, dw_accum, stream_, nullptr,
                               faults_.get());
  }

 private:
  uint64_t pool_attribute(cudaMemPoolAttr attr) const {
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t value = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
    return value;
  }

  // A host-to-device copy that does not wait for the stream (a plain cudaMemcpy from pageable
  // memory first waits for all queued work: once per micro-batch, for the batch's tokens). The
  // bytes go through a pinned buffer whose previous copy has finished, so the caller's memory is
  // free on return; the few buffers a step keeps in flight are allocated once and reused.
  struct Staging {
    void* host = nullptr;  // pinned, `bytes` long (nullptr and 0 after a failed regrowth)
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the slot's last copy
    uint64_t last_use = 0;
  };
  // Whether the slot's last copy has finished (a slot never used counts as finished).
  static bool finished(const Staging& s) {
    const cudaError_t status = cudaEventQuery(s.done);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // NOTE: the runtime keeps NotReady as the last error; the next launch check would see it
      return false;
    }
    CUDA_CHECK(status);
    return true;
  }
  void upload(Tensor& dst, const Tensor& src) {
    const size_t bytes = src.nbytes(), size = std::max(bytes, kMinStaging);
    Staging* slot = nullptr;
    for (Staging& s : staging_)
      if (s.bytes >= bytes && finished(s)) {
        slot = &s;
        break;
      }
    if (slot == nullptr && staging_.size() >= kMaxStaging) {  // all busy or small: wait for the oldest use
      slot = &*std::min_element(staging_.begin(), staging_.end(),
                                [](const Staging& a, const Staging& b) { return a.last_use < b.last_use; });
      CUDA_CHECK(cudaEventSynchronize(slot->done));
      if (slot->bytes < bytes) {
        CUDA_CHECK(cudaFreeHost(slot->host));
        slot->host = nullptr;
        slot->bytes = 0;
        CUDA_CHECK(cudaMallocHost(&slot->host, size));
        slot->bytes = size;
      }
    }
    if (slot == nullptr) {  // a new slot, whole before it joins the list
      Staging s;
      CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      const cudaError_t status = cudaMallocHost(&s.host, size);
      if (status != cudaSuccess) cudaEventDestroy(s.done);
      CUDA_CHECK(status);
      s.bytes = size;
      slot = &staging_.emplace_back(s);
    }
    slot->last_use = ++uploads_;
    std::memcpy(slot->host, src.raw(), bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), slot->host, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(slot->done, stream_));
  }
  static constexpr size_t kMaxStaging = 16;
  static constexpr size_t kMinStaging = size_t{64} << 10;
  static constexpr size_t kMaxStagedBytes = size_t{4} << 20;

  // Grown to the largest attention call seen; reused (one stream, calls in order).
  Tensor& attention_workspace(const Tensor& q, const Tensor& k) {
    // Sized from q and k before the op checks them: a wrong rank is named here, not as a bad dim index.
    ECHO_CHECK(q.ndim() == 4 && k.ndim() == 4,
               "cuda::attention: q and k must be (batch, seq, heads, head_dim), got {} and {}", q.describe(),
               k.describe());
    const size_t need = cuda::attention_workspace_bytes(q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), q.dtype());
    if (!attention_ws_.defined() || attention_ws_.nbytes() < need) {
      synchronize();  // the old workspace may still be in use by queued kernels
      attention_ws_ = {};
      // From the pool, like every tensor of this backend: the memory plan's reservation counts it.
      attention_ws_ = empty({static_cast<int64_t>(need)}, DType::u8);
    }
    return attention_ws_;
  }

  // What the plan does not count: cuBLASLt's workspace, NCCL's buffers, the runtime's own.
  static constexpr size_t kHeadroom = size_t{512} << 20;

  int device_;
  cudaStream_t stream_ = nullptr;
  uint64_t reserved_ = 0;  // the pool's reserved bytes after reserve(), 0 before
  // What lowers the memory a run needs, in its program's terms (reserve()'s `levers`).
  std::string levers_ = "a smaller batch or sequence length, or a larger tensor-parallel size";
  std::unique_ptr<cuda::GemmContext> gemm_;
  std::unique_ptr<cuda::DeferredFaults> faults_;  // the INT8 linears' NaN/Inf record, read once per step
  Tensor attention_ws_;
  std::vector<Staging> staging_;
  uint64_t uploads_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int local_rank) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  ECHO_INPUT_CHECK(status == cudaSuccess && count > 0, "'run.device' = cuda, but no CUDA device is usable here ({})",
                   status == cudaSuccess ? "none found" : cudaGetErrorString(status));
  // Ranks of a node take the node's GPUs in turn; several ranks may share one (then the
  // collectives stay host-staged, see comm/all_reduce.cpp).
  const int device = local_rank % count;
  log::get("backend")->info("CUDA backend on device {} of {} (node-local rank {})", device, count, local_rank);
  return std::make_unique<CudaBackend>(device);
}

}  // namespace echo::backend
