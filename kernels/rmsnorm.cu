// CUDA RMSNorm forward and backward (kernels/ops.cuh; CPU reference src/backend/cpu/rmsnorm.cpp).
//
// Design: a row is handled by one warp when dim <= kWarpRowMaxDim (q_norm / k_norm over head_dim,
// many short rows) and by one block otherwise (the hidden-size norms); the mean of squares and the
// backward's dot product are accumulated in fp32 and reduced in a fixed shuffle order. The weight
// gradient is a deterministic two-pass reduction over rows: pass 1 sums each chunk of rows per
// column (chunking from the row count only), pass 2 adds the chunk sums in chunk order, in double,
// to dw_accum.
#include <algorithm>
#include <utility>

#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

constexpr int64_t kWarpRowMaxDim = 1024;
constexpr int64_t kMaxDwChunks = 4096;  // pass-1 chunks of rows (grid y <= 65535)
constexpr int64_t kMinRowsPerChunk = 16;
constexpr int64_t kMaxPartialFloats = int64_t{1} << 22;  // 16 MiB of pass-1 sums at most

// The weight gradient's pass-1 chunks of rows: from rows and dim only (never the device), so the
// sum order is fixed. rows, dim > 0.
struct DwChunking {
  int64_t rows_per_chunk, chunks;
};
DwChunking dw_chunking(int64_t rows, int64_t dim) {
  const int64_t chunks_wanted = std::max<int64_t>(
      1, std::min({kMaxDwChunks, (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk, kMaxPartialFloats / dim}));
  const int64_t rows_per_chunk = (rows + chunks_wanted - 1) / chunks_wanted;
  return {rows_per_chunk, (rows + rows_per_chunk - 1) / rows_per_chunk};
}

// A row per warp (kBlockRow false) or per block (true): the row loop, the lanes and the reduction.
template <bool kBlockRow>
struct RowGroup {
  __device__ static int64_t first_row() {
    if constexpr (kBlockRow) return blockIdx.x;
    return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  }
  __device__ static int64_t row_stride() {
    if constexpr (kBlockRow) return gridDim.x;
    return static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  }
  __device__ static int lane() { return kBlockRow ? static_cast<int>(threadIdx.x) : threadIdx.x % kWarpSize; }
  __device__ static int lanes() { return kBlockRow ? static_cast<int>(blockDim.x) : kWarpSize; }
  __device__ static float sum(float v) {
    if constexpr (kBlockRow) return block_reduce(v, Sum{}, 0.0f);
    return warp_reduce(v, Sum{});
  }
};

// NOTE: the row loop bound is uniform over a row's group, so every member reaches the reductions.
// out may be x (in place, as on the CPU): a row is read whole before it is written, and each
// element is written by the thread that read it; hence no __restrict__ on x and out.
template <class T, bool kBlockRow>
__global__ void rmsnorm_forward_kernel(const T* x, const T* __restrict__ w, int64_t rows, int64_t dim, float eps,
                                       T* out, float* __restrict__ rstd) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first_row(); r < rows; r += G::row_stride()) {
    const T* xr = x + r * dim;
    T* yr = out + r * dim;
    float sum_sq = 0.0f;
    for (int64_t i = G::lane(); i < dim; i += G::lanes()) {
      const float v = load(xr + i);
      sum_sq += v * v;
    }
    sum_sq = G::sum(sum_sq);
    const float s = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
    if (G::lane() == 0) rstd[r] = s;
    for (int64_t i = G::lane(); i < dim; i += G::lanes()) store(yr + i, load(xr + i) * s * load(w + i));
  }
}

// dx_j = r w_j dy_j - (r^3 / dim) x_j sum_i(dy_i w_i x_i), as the CPU. dx may be dout (in place,
// as on the CPU), like out and x of the forward.
template <class T, bool kBlockRow>
__global__ void rmsnorm_backward_dx_kernel(const T* dout, const T* __restrict__ x, const T* __restrict__ w,
                                           const float* __restrict__ rstd, int64_t rows, int64_t dim, T* dx) {
  using G = RowGroup<kBlockRow>;
  for (int64_t r = G::first_row(); r < rows; r += G::row_stride()) {
    const T* dy = dout + r * dim;
    const T* xr = x + r * dim;
    T* dxr = dx + r * dim;
    const float s = rstd[r];
    float dot = 0.0f;
    for (int64_t i = G::lane(); i < dim; i += G::lanes()) dot += load(dy + i) * load(w + i) * load(xr + i);
    dot = G::sum(dot);
    const float coef = s * s * s * dot / static_cast<float>(dim);
    for (int64_t i = G::lane(); i < dim; i += G::lanes())
      store(dxr + i, s * load(w + i) * load(dy + i) - coef * load(xr + i));
  }
}

// Pass 1: partial[chunk, i] = sum over the chunk's rows, in row order, of dout * x * rstd.
// grid.y = chunks; columns are consecutive across a warp (coalesced).
template <class T>
__global__ void rmsnorm_dw_partial_kernel(const T* __restrict__ dout, const T* __restrict__ x,
                                          const float* __restrict__ rstd, int64_t rows, int64_t dim,
                                          int64_t rows_per_chunk, float* __restrict__ partial) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < dim; i += stride) {
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc += load(dout + r * dim + i) * load(x + r * dim + i) * rstd[r];
    partial[chunk * dim + i] = acc;
  }
}

// Pass 2: dw_accum[i] += the chunk sums of column i, added in chunk order in double (thousands of
// chunks would lose fp32 bits), rounded once.
__global__ void rmsnorm_dw_final_kernel(const float* __restrict__ partial, int64_t chunks, int64_t dim,
                                        float* __restrict__ dw_accum) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < dim; i += stride) {
    double acc = static_cast<double>(dw_accum[i]);
    for (int64_t c = 0; c < chunks; ++c) acc += static_cast<double>(partial[c * dim + i]);
    dw_accum[i] = static_cast<float>(acc);
  }
}

// Checks x (..., dim), read as (rows, dim) as on the CPU backend, and w (dim) of x's dtype;
// returns {rows, dim}.
std::pair<int64_t, int64_t> check_rows(const char* op, const Tensor& x, const Tensor& w) {
  check_tensor(op, "x", x, {DType::f32, DType::bf16});
  ECHO_CHECK(x.ndim() >= 1 && x.dim(-1) > 0, "cuda::{}: x must be (rows, dim) with dim > 0, got {}", op, x.describe());
  const int64_t dim = x.dim(-1);
  check_tensor(op, "w", w, {DType::f32, DType::bf16});
  check_same_dtype(op, "w", w, x, "x");
  check_numel(op, "w", w, dim);
  return {x.numel() / dim, dim};
}

unsigned row_blocks(int64_t rows, int64_t dim) {
  return dim <= kWarpRowMaxDim ? blocks_for(rows, kThreads / kWarpSize) : blocks_for(rows, 1);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd, cudaStream_t stream) {
  const char* op = "rmsnorm_forward";
  const auto [rows, dim] = check_rows(op, x, w);
  check_tensor(op, "out", out, {DType::f32, DType::bf16});
  check_same_dtype(op, "out", out, x, "x");
  check_numel(op, "out", out, x.numel());
  check_tensor(op, "rstd", rstd, {DType::f32});
  check_numel(op, "rstd", rstd, rows);
  ECHO_CHECK(eps >= 0.0, "cuda::rmsnorm_forward: eps {} < 0", eps);
  if (rows == 0) return;
  const float eps_f = static_cast<float>(eps);  // the CPU's T eps
  const unsigned blocks = row_blocks(rows, dim);
  dispatch_activation(x.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    if (dim <= kWarpRowMaxDim) {
      ECHO_LAUNCH(blocks, kThreads, 0, stream, rmsnorm_forward_kernel<T, false>)
      (ptr<T>(x), ptr<T>(w), rows, dim, eps_f, ptr<T>(out), ptr<float>(rstd));
    } else {
      ECHO_LAUNCH(blocks, kThreads, 0, stream, rmsnorm_forward_kernel<T, true>)
      (ptr<T>(x), ptr<T>(w), rows, dim, eps_f, ptr<T>(out), ptr<float>(rstd));
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return 0;
  return static_cast<size_t>(dw_chunking(rows, dim).chunks * dim) * sizeof(float);
}

void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw_accum, cudaStream_t stream) {
  const char* op = "rmsnorm_backward";
  const auto [rows, dim] = check_rows(op, x, w);
  const auto check_like_x = [&](const char* name, const Tensor& t) {
    check_tensor(op, name, t, {DType::f32, DType::bf16});
    check_same_dtype(op, name, t, x, "x");
    check_numel(op, name, t, x.numel());
  };
  check_like_x("dout", dout);
  check_like_x("dx", dx);
  check_tensor(op, "rstd", rstd, {DType::f32});
  check_numel(op, "rstd", rstd, rows);
  check_tensor(op, "dw_accum", dw_accum, {DType::f32});
  check_numel(op, "dw_accum", dw_accum, dim);
  if (rows == 0) return;

  const auto [rows_per_chunk, chunks] = dw_chunking(rows, dim);
  Scratch partial(static_cast<size_t>(chunks * dim) * sizeof(float), stream);

  const unsigned blocks = row_blocks(rows, dim);
  const dim3 partial_grid(blocks_for(dim, kThreads), static_cast<unsigned>(chunks));
  const unsigned final_blocks = blocks_for(dim, kThreads);
  dispatch_activation(x.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    // NOTE: dw first: dx may overwrite dout.
    ECHO_LAUNCH(partial_grid, kThreads, 0, stream, rmsnorm_dw_partial_kernel<T>)
    (ptr<T>(dout), ptr<T>(x), ptr<float>(rstd), rows, dim, rows_per_chunk, partial.as<float>());
    CUDA_CHECK(cudaGetLastError());
    if (dim <= kWarpRowMaxDim) {
      ECHO_LAUNCH(blocks, kThreads, 0, stream, rmsnorm_backward_dx_kernel<T, false>)
      (ptr<T>(dout), ptr<T>(x), ptr<T>(w), ptr<float>(rstd), rows, dim, ptr<T>(dx));
    } else {
      ECHO_LAUNCH(blocks, kThreads, 0, stream, rmsnorm_backward_dx_kernel<T, true>)
      (ptr<T>(dout), ptr<T>(x), ptr<T>(w), ptr<float>(rstd), rows, dim, ptr<T>(dx));
    }
    CUDA_CHECK(cudaGetLastError());
  });
  ECHO_LAUNCH(final_blocks, kThreads, 0, stream, rmsnorm_dw_final_kernel)
  (partial.as<float>(), chunks, dim, ptr<float>(dw_accum));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
