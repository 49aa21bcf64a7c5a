// CUDA vocab-parallel cross-entropy, forward and backward (kernels/ops.cuh; CPU reference
// src/backend/cpu/cross_entropy.cpp, Megatron's VocabParallelCrossEntropy; docs/design.md §3).
//
// Forward: one block per token row computes, in double, the shard's row max m_loc, the sum of
// exp(logit - m_loc) and the target logit when the shard owns the target; one copy brings the rows'
// statistics to the host (the wait of the op). The host then does what the CPU does through the
// TpReducer: the max over the group, then one sum of (shard sum * exp(m_loc - max), target logit,
// owners); lse = max + log(sum) goes back to the device as f32 in a second copy. Rescaling
// the shard sums by exp(m_loc - max) lets one pass over the logits serve both reductions; it
// changes the sum only in the last bits of a double (with tp = 1 the factor is exactly 1).
// With a local reducer (tp = 1) the host has nothing to do: cross_entropy_accumulate finishes on
// the device instead (lse, and the loss added to an accumulator), so a step never waits here. With
// a device reducer (tp > 1, NCCL between distinct GPUs) it does the same two reductions on the
// stream; a counted target that not exactly one shard owns then makes the loss NaN.
// Backward: one block per row, (exp(logit - lse) - onehot) * dloss / count in double, rounded once.
#include <cmath>
#include <utility>
#include <vector>

#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

// The per-row statistics, (kStats, tokens) doubles.
enum Stat : int64_t { kMax, kSumExp, kTargetLogit, kOwner, kCounted, kStats };

template <class T>
__global__ void cross_entropy_stats_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                                           int64_t tokens, int64_t vocab_begin, int64_t vocab_local,
                                           int32_t ignore_index, double* __restrict__ stats) {
  constexpr float kNegInf = -INFINITY;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const T* row = logits + t * vocab_local;
    float m = kNegInf;
    for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) m = Max{}(m, load(row + j));
    m = block_reduce(m, Max{}, kNegInf);
    const double md = static_cast<double>(m);
    double s = 0.0;
    // A shard whose logits are all -inf contributes nothing (not exp(-inf - -inf) = NaN).
    if (m != kNegInf) {
      for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) s += exp(static_cast<double>(load(row + j)) - md);
    }
    s = block_reduce(s, Sum{}, 0.0);
    if (threadIdx.x == 0) {
      const int64_t target = targets[t];
      const bool counted = targets[t] != ignore_index;
      const bool owned = counted && target >= vocab_begin && target < vocab_begin + vocab_local;
      stats[kMax * tokens + t] = md;
      stats[kSumExp * tokens + t] = s;
      stats[kTargetLogit * tokens + t] = owned ? static_cast<double>(load(row + (target - vocab_begin))) : 0.0;
      stats[kOwner * tokens + t] = owned ? 1.0 : 0.0;
      stats[kCounted * tokens + t] = counted ? 1.0 : 0.0;
    }
  }
}

// One block: lse = max + log(sum) per row, and loss_acc += (mean over counted rows of lse - target
// logit) / divisor, in a fixed order (deterministic). The statistics are the group's already (tp = 1:
// the shard's own). A counted target no shard owns makes the accumulated loss NaN, which the
// trainer's non-finite loss check reports (the model checks targets on the host before this).
__global__ void cross_entropy_finish_kernel(const double* __restrict__ stats, int64_t tokens, float* __restrict__ lse,
                                            double divisor, double* __restrict__ loss_acc) {
  double loss = 0.0, count = 0.0, unowned = 0.0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) {
    const double row_lse = stats[kMax * tokens + t] + log(stats[kSumExp * tokens + t]);
    lse[t] = static_cast<float>(row_lse);
    if (stats[kCounted * tokens + t] == 0.0) continue;
    if (stats[kOwner * tokens + t] != 1.0) unowned += 1.0;
    loss += row_lse - stats[kTargetLogit * tokens + t];
    count += 1.0;
  }
  loss = block_reduce(loss, Sum{}, 0.0);
  count = block_reduce(count, Sum{}, 0.0);
  unowned = block_reduce(unowned, Sum{}, 0.0);
  if (threadIdx.x == 0) *loss_acc += unowned > 0.0 ? NAN : (count > 0.0 ? loss / count : 0.0) / divisor;
}

__global__ void add_scalar_kernel(double* acc, double value) { *acc += value; }

// Between the device reducer's two calls: each shard sum rescaled to the group's max, as the host
// path does (exp(m_loc - max), in double), and the group max put in place of the shard's.
__global__ void rescale_to_group_max_kernel(double* __restrict__ stats, const double* __restrict__ group_max,
                                            int64_t tokens) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += stride) {
    const double local_sum = stats[kSumExp * tokens + t];
    stats[kSumExp * tokens + t] = local_sum == 0.0 ? 0.0 : local_sum * exp(stats[kMax * tokens + t] - group_max[t]);
    stats[kMax * tokens + t] = group_max[t];
  }
}

// The statistics of every row into stats (kStats * tokens doubles), on the stream.
void launch_stats(const Tensor& logits, const Tensor& targets, int64_t tokens, int64_t vocab_begin, int64_t vocab_local,
                  int32_t ignore_index, double* stats, cudaStream_t stream) {
  dispatch_activation(logits.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(tokens, 1), kThreads, 0, stream, cross_entropy_stats_kernel<T>)
    (ptr<T>(logits), ptr<int32_t>(targets), tokens, vocab_begin, vocab_local, ignore_index, stats);
  });
  CUDA_CHECK(cudaGetLastError());
}

// NOTE: no __restrict__ on logits / dlogits: the gradient may overwrite the logits in place (each
// element is read, then written, by one thread).
template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* __restrict__ targets,
                                              const float* __restrict__ lse, int64_t tokens, int64_t vocab_begin,
                                              int64_t vocab_local, int32_t ignore_index, double scale, T* dlogits) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const T* row = logits + t * vocab_local;
    T* drow = dlogits + t * vocab_local;
    if (targets[t] == ignore_index) {
      for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) store(drow + j, 0.0f);
      continue;
    }
    const double row_lse = static_cast<double>(lse[t]);
    const int64_t local_target = static_cast<int64_t>(targets[t]) - vocab_begin;
    for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) {
      const double p = exp(static_cast<double>(load(row + j)) - row_lse);
      store_double(drow + j, (j == local_target ? p - 1.0 : p) * scale);
    }
  }
}

// Checks logits (tokens, vocab_local), targets (tokens); returns {tokens, vocab_local}.
std::pair<int64_t, int64_t> check_logits(const char* op, const Tensor& logits, const Tensor& targets,
                                         int64_t vocab_begin) {
  check_tensor(op, "logits", logits, {DType::f32, DType::bf16});
  ECHO_CHECK(logits.ndim() == 2 && logits.dim(1) > 0, "cuda::{}: logits must be (tokens, vocab_local), got {}", op,
             logits.describe());
  check_tensor(op, "targets", targets, {DType::i32});
  check_numel(op, "targets", targets, logits.dim(0));
  ECHO_CHECK(vocab_begin >= 0, "cuda::{}: vocab_begin {} < 0", op, vocab_begin);
  return {logits.dim(0), logits.dim(1)};
}

}  // namespace

// NOTE: every rank of the TP group must reach both reducer calls (they are collectives), so the
// check that can fail after the first call depends only on reduced values, identical on all ranks.
double cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                             const backend::TpReducer& reducer, Tensor& lse, cudaStream_t stream) {
  const char* op = "cross_entropy_forward";
  const auto [tokens, vocab_local] = check_logits(op, logits, targets, vocab_begin);
  check_tensor(op, "lse", lse, {DType::f32});
  check_numel(op, "lse", lse, tokens);
  ECHO_CHECK(reducer.max && reducer.sum, "cuda::cross_entropy_forward: reducer without max / sum");

  std::vector<double> stats(static_cast<size_t>(kStats * tokens));
  if (tokens > 0) {
    Scratch device_stats(stats.size() * sizeof(double), stream);
    launch_stats(logits, targets, tokens, vocab_begin, vocab_local, ignore_index, device_stats.as<double>(), stream);
    CUDA_CHECK(cudaMemcpyAsync(stats.data(), device_stats.as<double>(), stats.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const double* local_max = stats.data() + kMax * tokens;
  const double* local_sum = stats.data() + kSumExp * tokens;
  const double* counted = stats.data() + kCounted * tokens;

  std::vector<double> row_max(local_max, local_max + tokens);
  reducer.max(row_max);

  // One sum reduction of three (tokens) blocks, as on the CPU: the sum of exp(logit - max), the
  // target logit (only its owner contributes) and the number of owners (1 for a counted token).
  std::vector<double> sums(static_cast<size_t>(3 * tokens));
  double* sum_exp = sums.data();
  double* target_logit = sums.data() + tokens;
  double* owners = sums.data() + 2 * tokens;
  for (int64_t t = 0; t < tokens; ++t) {
    sum_exp[t] = local_sum[t] == 0.0 ? 0.0 : local_sum[t] * std::exp(local_max[t] - row_max[t]);
    target_logit[t] = stats[kTargetLogit * tokens + t];
    owners[t] = stats[kOwner * tokens + t];
  }
  reducer.sum(sums);

  std::vector<double> row_lse(tokens);
  std::vector<float> lse_host(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    row_lse[t] = row_max[t] + std::log(sum_exp[t]);
    lse_host[t] = static_cast<float>(row_lse[t]);
  }
  if (tokens > 0) {
    // NOTE: the wait keeps lse_host alive until the copy has read it (the stream is idle already,
    // so it costs only the copy).
    CUDA_CHECK(
        cudaMemcpyAsync(lse.raw(), lse_host.data(), lse_host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  double loss = 0.0;
  int64_t count = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (counted[t] == 0.0) continue;
    ECHO_CHECK(owners[t] == 1.0, "cuda::cross_entropy_forward: the target at {} is held by {} vocab shards, not 1", t,
               owners[t]);
    loss += row_lse[t] - target_logit[t];
    ++count;
  }
  return count > 0 ? loss / static_cast<double>(count) : 0.0;
}

void cross_entropy_accumulate(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                              const backend::TpReducer& reducer, Tensor& lse, double divisor, Tensor& loss_acc,
                              cudaStream_t stream) {
  const char* op = "cross_entropy_accumulate";
  check_tensor(op, "loss_acc", loss_acc, {DType::f64});
  check_numel(op, "loss_acc", loss_acc, 1);
  ECHO_CHECK(divisor > 0, "cuda::{}: divisor {} must be > 0", op, divisor);
  if (!reducer.local && !reducer.device) {  // the reductions go through the host: the loss comes back anyway
    const double loss = cross_entropy_forward(logits, targets, vocab_begin, ignore_index, reducer, lse, stream);
    ECHO_LAUNCH(1, 1, 0, stream, add_scalar_kernel)(ptr<double>(loss_acc), loss / divisor);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const auto [tokens, vocab_local] = check_logits(op, logits, targets, vocab_begin);
  check_tensor(op, "lse", lse, {DType::f32});
  check_numel(op, "lse", lse, tokens);
  if (tokens == 0) return;  // adds 0
  Scratch stats(static_cast<size_t>(kStats * tokens) * sizeof(double), stream);
  launch_stats(logits, targets, tokens, vocab_begin, vocab_local, ignore_index, stats.as<double>(), stream);
  if (reducer.device) {  // tp > 1 on distinct GPUs: the host path's two reductions, on the stream
    // NOTE: every rank of the group has the same tokens, so all make both calls (or none, above).
    Scratch group_max(static_cast<size_t>(tokens) * sizeof(double), stream);
    CUDA_CHECK(cudaMemcpyAsync(group_max.as<double>(), stats.as<double>() + kMax * tokens,
                               static_cast<size_t>(tokens) * sizeof(double), cudaMemcpyDeviceToDevice, stream));
    reducer.device(group_max.as<double>(), tokens, DType::f64, backend::ReduceOp::max, stream);
    ECHO_LAUNCH(blocks_for(tokens, kThreads), kThreads, 0, stream, rescale_to_group_max_kernel)
    (stats.as<double>(), group_max.as<double>(), tokens);
    CUDA_CHECK(cudaGetLastError());
    // The shard sums, target logits and owner counts are adjacent rows of stats: one sum.
    static_assert(kTargetLogit == kSumExp + 1 && kOwner == kSumExp + 2);
    reducer.device(stats.as<double>() + kSumExp * tokens, 3 * tokens, DType::f64, backend::ReduceOp::sum, stream);
  }
  ECHO_LAUNCH(1, kThreads, 0, stream, cross_entropy_finish_kernel)
  (stats.as<double>(), tokens, ptr<float>(lse), divisor, ptr<double>(loss_acc));
  CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t vocab_begin,
                            int32_t ignore_index, int64_t count, double dloss, Tensor& dlogits, cudaStream_t stream) {
  const char* op = "cross_entropy_backward";
  const auto [tokens, vocab_local] = check_logits(op, logits, targets, vocab_begin);
  check_tensor(op, "lse", lse, {DType::f32});
  check_numel(op, "lse", lse, tokens);
  check_tensor(op, "dlogits", dlogits, {DType::f32, DType::bf16});
  check_same_dtype(op, "dlogits", dlogits, logits, "logits");
  check_numel(op, "dlogits", dlogits, logits.numel());
  ECHO_CHECK(count >= 0, "cuda::cross_entropy_backward: count {} < 0", count);
  if (tokens == 0) return;
  const double scale = count > 0 ? dloss / static_cast<double>(count) : 0.0;
  dispatch_activation(logits.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(tokens, 1), kThreads, 0, stream, cross_entropy_backward_kernel<T>)
    (ptr<T>(logits), ptr<int32_t>(targets), ptr<float>(lse), tokens, vocab_begin, vocab_local, ignore_index, scale,
     ptr<T>(dlogits));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
