// CUDA causal GQA attention (kernels/attention.cuh): strided-batched cuBLASLt GEMMs for the score
// and output products, a masked softmax kernel forward and its gradient kernel backward, on
// materialized (n_kv, seq, seq) f32 score buffers in the caller's workspace.
//
// Indexing. q is (batch, seq, n_q, d) row-major: head h of batch entry b is the (seq, d) matrix at
// element b*seq*n_q*d + h*d with row stride n_q*d; k, v likewise with n_kv. With group = n_q / n_kv
// and h = g*group + r, fixing (b, r) and running g over [0, n_kv) moves the q head by group*d
// elements and the kv head by d: one strided batch of n_kv products. The score buffer holds those
// n_kv (seq, seq) matrices contiguously, so its row `row` is (g, i) = (row / seq, row % seq) and
// lse[b, h, i] sits at (b*n_q + r)*seq + g*group*seq + i.
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
#include "device_util.cuh"
// clang-format on

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.cuh"
#include "gemm.cuh"

namespace echo::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;  // a multiple of 32: the block reduction relies on whole warps
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kGridCap = 65535;  // grid-stride loops cover the rest
constexpr size_t kAlign = 256;

unsigned grid_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kGridCap));
}

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// ---- Device helpers -------------------------------------------------------------------------------


// Max (kMax) or sum over the block, the same bits in every thread: an xor butterfly inside each
// warp (a + b == b + a, so all lanes agree), then the warp partials in warp order. Fixed order, so
// deterministic. `smem` holds 32 floats; the leading barrier lets a previous call's readers finish.
template <bool kMax>
__device__ float block_reduce(float v, float* smem) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int num_warps = static_cast<int>(blockDim.x) >> 5;
  v = lane < num_warps ? smem[lane] : (kMax ? -INFINITY : 0.0f);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

// One block per score row (g, i): p[j] = exp(s[j] - max) / sum for j <= i, exactly 0 above the
// diagonal (so later tokens cannot change an earlier row); lse = max + log(sum). p may alias s
// (f32): each thread reads its element before writing it, and every read of the row's reductions
// is done before the barrier inside the last block_reduce.
template <class T>
__global__ void causal_softmax_forward_kernel(const float* s, T* p, float* lse, int64_t seq, int64_t rows,
                                              int64_t lse_g_stride) {
  __shared__ float smem[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t g = row / seq;
    const int64_t i = row % seq;
    const float* srow = s + row * seq;
    T* prow = p + row * seq;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, srow[j]);
    m = block_reduce<true>(m, smem);
    float l = 0.0f;
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) l += expf(srow[j] - m);
    l = block_reduce<false>(l, smem);
    const float inv_l = 1.0f / l;
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      const float v = j <= i ? expf(srow[j] - m) * inv_l : 0.0f;
      prow[j] = from_float<T>(v);
    }
    if (threadIdx.x == 0) lse[g * lse_g_stride + i] = m + logf(l);
  }
}

// One block per score row (g, i) of the backward: D = sum_{j<=i} P_ij dP_ij, then for j <= i
// P = exp(S - lse), dS = P * (dP - D) * scale (the scale of dQ = scale dS K folded in, as the CPU
// reference does), 0 above the diagonal. D equals dO_i . O_i (the CPU reference's form: dP = dO V^T
// and O = P V), but is taken from the f32 P and dP: O is stored in bf16, and its rounding made
// dQ / dK errors reach the 1e-2 tolerance (a kernel review, docs/design.md "CUDA backend"). p_out
// may alias s and ds_out dp (f32): the first pass only reads, and block_reduce's barrier ends it
// before the second pass writes.
template <class T>
__global__ void causal_softmax_backward_kernel(const float* s, const float* dp, const float* lse, int64_t lse_g_stride,
                                               int64_t seq, int64_t rows, float scale, T* p_out, T* ds_out) {
  __shared__ float smem[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t g = row / seq;
    const int64_t i = row % seq;
    const float row_lse = lse[g * lse_g_stride + i];
    const int64_t base = row * seq;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += expf(s[base + j] - row_lse) * dp[base + j];
    dot = block_reduce<false>(dot, smem);
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      float pv = 0.0f;
      float dsv = 0.0f;
      if (j <= i) {
        const float sv = s[base + j];
        const float dpv = dp[base + j];
        pv = expf(sv - row_lse);
        dsv = pv * (dpv - dot) * scale;
      }
      p_out[base + j] = from_float<T>(pv);
      ds_out[base + j] = from_float<T>(dsv);
    }
  }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    y[i] = from_float<__nv_bfloat16>(x[i]);  // NaN bits as the CPU backend writes them
  }
}

// ---- Host side ------------------------------------------------------------------------------------

struct Shape {
  int64_t batch, seq, n_q, n_kv, d;
};

// Byte offsets into the (256-aligned) workspace. f32: P over S and dS over dP in place; bf16:
// separate bf16 P / dS for the GEMMs and f32 dK / dV accumulators of one batch entry.
struct Layout {
  size_t s = 0, dp = 0, p_lo = 0, ds_lo = 0, dk_acc = 0, dv_acc = 0, total = 0;
};

Layout workspace_layout(int64_t seq, int64_t n_kv, int64_t d, DType dtype) {
  const size_t scores = static_cast<size_t>(n_kv) * static_cast<size_t>(seq) * static_cast<size_t>(seq);
  const size_t kv_elems = static_cast<size_t>(seq) * static_cast<size_t>(n_kv) * static_cast<size_t>(d);
  Layout l;
  size_t offset = 0;
  auto take = [&offset](size_t bytes) {
    const size_t at = offset;
    offset += align_up(bytes);
    return at;
  };
  l.s = take(scores * sizeof(float));
  l.dp = take(scores * sizeof(float));
  if (dtype == DType::bf16) {
    l.p_lo = take(scores * 2);
    l.ds_lo = take(scores * 2);
    l.dk_acc = take(kv_elems * sizeof(float));
    l.dv_acc = take(kv_elems * sizeof(float));
  }
  l.total = offset + kAlign;  // slack to align an unaligned workspace view
  return l;
}

void check_tensor(const char* op, const char* name, const Tensor& t, const std::vector<int64_t>& shape, DType dtype) {
  ECHO_CHECK(t.defined(), "{}: {} is an undefined tensor", op, name);
  ECHO_CHECK(t.is_cuda() && t.is_contiguous() && t.dtype() == dtype && t.shape() == shape,
             "{}: {} must be a contiguous {} {} cuda tensor, got {}", op, name, dtype, format_shape(shape),
             t.describe());
}

Shape check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  ECHO_CHECK(q.defined() && k.defined() && v.defined(), "{}: undefined q, k or v", op);
  ECHO_CHECK(q.ndim() == 4 && k.ndim() == 4,
             "{}: q must be (batch, seq, n_q, d) and k (batch, seq, n_kv, d); got q {}, k {}", op, q.describe(),
             k.describe());
  ECHO_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::bf16, "{}: q must be f32 or bf16, got {}", op,
             q.describe());
  const Shape s{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  ECHO_CHECK(s.n_q > 0 && s.n_kv > 0 && s.d > 0 && s.n_q % s.n_kv == 0,
             "{}: bad heads: n_q {} must be a positive multiple of n_kv {}, d {} > 0 (q {}, k {})", op, s.n_q, s.n_kv,
             s.d, q.describe(), k.describe());
  check_tensor(op, "q", q, q.shape(), q.dtype());
  check_tensor(op, "k", k, {s.batch, s.seq, s.n_kv, s.d}, q.dtype());
  check_tensor(op, "v", v, {s.batch, s.seq, s.n_kv, s.d}, q.dtype());
  return s;
}

// The 256-aligned start of the workspace, checked to hold `layout`.
char* workspace_base(const char* op, Tensor& workspace, const Layout& layout) {
  ECHO_CHECK(
      workspace.defined() && workspace.is_cuda() && workspace.is_contiguous() && workspace.nbytes() >= layout.total,
      "{}: the workspace must be a contiguous cuda tensor of at least {} bytes, got {} ({} bytes)", op, layout.total,
      workspace.describe(), workspace.defined() ? workspace.nbytes() : 0);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace.raw());
  return reinterpret_cast<char*>((raw + kAlign - 1) / kAlign * kAlign);
}

const char* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw()) + elements * static_cast<int64_t>(t.element_size());
}

// One (b, r) slice's scaled f32 scores S_g = scale * Q_{g*group + r} K_g^T for every kv head g.
void scores_gemm(GemmContext& ctx, const Shape& sh, DType t, const char* q_head, const char* k_batch, float* s,
                 cudaStream_t stream) {
  const int64_t group = sh.n_q / sh.n_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(sh.d));
  gemm_strided_batched(ctx, false, true, sh.seq, sh.seq, sh.d, sh.n_kv, scale,
                       MatrixRef{q_head, t, sh.n_q * sh.d, group * sh.d}, MatrixRef{k_batch, t, sh.n_kv * sh.d, sh.d},
                       0.0, MatrixRef{s, DType::f32, sh.seq, sh.seq * sh.seq}, stream);
}

}  // namespace

size_t attention_workspace_bytes(int64_t batch, int64_t seq, int64_t n_q, int64_t n_kv, int64_t d, DType dtype) {
  (void)batch;  // batch entries run one after another through the same buffers
  (void)n_q;    // the n_q / n_kv heads of a group run one after another
  ECHO_CHECK(seq >= 0 && n_kv > 0 && d > 0, "attention_workspace_bytes: bad shape (seq {}, n_kv {}, d {})", seq, n_kv,
             d);
  return workspace_layout(seq, n_kv, d, dtype).total;
}

void attention_forward(GemmContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                       Tensor& workspace, cudaStream_t stream) {
  const char* op = "attention_forward";
  const Shape sh = check_qkv(op, q, k, v);
  check_tensor(op, "out", out, q.shape(), q.dtype());  // checked, not read: D comes from P and dP (above)
  check_tensor(op, "lse", lse, {sh.batch, sh.n_q, sh.seq}, DType::f32);
  if (sh.batch == 0 || sh.seq == 0) return;
  const DType t = q.dtype();
  const bool bf16 = t == DType::bf16;
  const Layout layout = workspace_layout(sh.seq, sh.n_kv, sh.d, t);
  char* ws = workspace_base(op, workspace, layout);
  float* s = reinterpret_cast<float*>(ws + layout.s);
  void* p = bf16 ? static_cast<void*>(ws + layout.p_lo) : static_cast<void*>(s);
  const int64_t group = sh.n_q / sh.n_kv;
  const int64_t q_ld = sh.n_q * sh.d, kv_ld = sh.n_kv * sh.d, score_elems = sh.seq * sh.seq;
  const int64_t rows = sh.n_kv * sh.seq;
  float* lse_data = lse.data<float>();
  for (int64_t b = 0; b < sh.batch; ++b) {
    const int64_t q_batch = b * sh.seq * q_ld, kv_batch = b * sh.seq * kv_ld;
    for (int64_t r = 0; r < group; ++r) {
      scores_gemm(ctx, sh, t, at(q, q_batch + r * sh.d), at(k, kv_batch), s, stream);
      float* lse_head = lse_data + (b * sh.n_q + r) * sh.seq;
      if (bf16) {
        ECHO_LAUNCH(grid_for(rows, 1), kThreads, 0, stream, causal_softmax_forward_kernel<__nv_bfloat16>)
        (s, static_cast<__nv_bfloat16*>(p), lse_head, sh.seq, rows, group * sh.seq);
      } else {
        ECHO_LAUNCH(grid_for(rows, 1), kThreads, 0, stream, causal_softmax_forward_kernel<float>)
        (s, s, lse_head, sh.seq, rows, group * sh.seq);
      }
      CUDA_CHECK(cudaGetLastError());
      // O_h = P_g V_g
      gemm_strided_batched(ctx, false, false, sh.seq, sh.d, sh.seq, sh.n_kv, 1.0, MatrixRef{p, t, sh.seq, score_elems},
                           MatrixRef{at(v, kv_batch), t, kv_ld, sh.d}, 0.0,
                           MatrixRef{at(out, q_batch + r * sh.d), t, q_ld, group * sh.d}, stream);
    }
  }
}

void attention_backward(GemmContext& ctx, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& workspace,
                        cudaStream_t stream) {
  const char* op = "attention_backward";
  const Shape sh = check_qkv(op, q, k, v);
  check_tensor(op, "dout", dout, q.shape(), q.dtype());
  check_tensor(op, "out", out, q.shape(), q.dtype());  // checked, not read: D comes from P and dP (above)
  check_tensor(op, "lse", lse, {sh.batch, sh.n_q, sh.seq}, DType::f32);
  check_tensor(op, "dq", dq, q.shape(), q.dtype());
  check_tensor(op, "dk", dk, k.shape(), q.dtype());
  check_tensor(op, "dv", dv, v.shape(), q.dtype());
  if (sh.batch == 0 || sh.seq == 0) return;
  const DType t = q.dtype();
  const bool bf16 = t == DType::bf16;
  const Layout layout = workspace_layout(sh.seq, sh.n_kv, sh.d, t);
  char* ws = workspace_base(op, workspace, layout);
  float* s = reinterpret_cast<float*>(ws + layout.s);
  float* dp = reinterpret_cast<float*>(ws + layout.dp);
  void* p = bf16 ? static_cast<void*>(ws + layout.p_lo) : static_cast<void*>(s);
  void* ds = bf16 ? static_cast<void*>(ws + layout.ds_lo) : static_cast<void*>(dp);
  const int64_t group = sh.n_q / sh.n_kv;
  const int64_t q_ld = sh.n_q * sh.d, kv_ld = sh.n_kv * sh.d, score_elems = sh.seq * sh.seq;
  const int64_t rows = sh.n_kv * sh.seq;
  const int64_t kv_batch_elems = sh.seq * kv_ld;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.d)));
  const float* lse_data = lse.data<float>();
  for (int64_t b = 0; b < sh.batch; ++b) {
    const int64_t q_batch = b * sh.seq * q_ld, kv_batch = b * kv_batch_elems;
    // dK / dV of this batch entry accumulate in f32: in place for f32, else in the workspace.
    const void* dk_acc =
        bf16 ? static_cast<const void*>(ws + layout.dk_acc) : static_cast<const void*>(at(dk, kv_batch));
    const void* dv_acc =
        bf16 ? static_cast<const void*>(ws + layout.dv_acc) : static_cast<const void*>(at(dv, kv_batch));
    for (int64_t r = 0; r < group; ++r) {
      const char* q_head = at(q, q_batch + r * sh.d);
      const char* do_head = at(dout, q_batch + r * sh.d);
      scores_gemm(ctx, sh, t, q_head, at(k, kv_batch), s, stream);
      // dP_g = dO_h V_g^T
      gemm_strided_batched(ctx, false, true, sh.seq, sh.seq, sh.d, sh.n_kv, 1.0,
                           MatrixRef{do_head, t, q_ld, group * sh.d}, MatrixRef{at(v, kv_batch), t, kv_ld, sh.d}, 0.0,
                           MatrixRef{dp, DType::f32, sh.seq, score_elems}, stream);
      const float* lse_head = lse_data + (b * sh.n_q + r) * sh.seq;
      if (bf16) {
        ECHO_LAUNCH(grid_for(rows, 1), kThreads, 0, stream, causal_softmax_backward_kernel<__nv_bfloat16>)
        (s, dp, lse_head, group * sh.seq, sh.seq, rows, scale, static_cast<__nv_bfloat16*>(p),
         static_cast<__nv_bfloat16*>(ds));
      } else {
        ECHO_LAUNCH(grid_for(rows, 1), kThreads, 0, stream, causal_softmax_backward_kernel<float>)
        (s, dp, lse_head, group * sh.seq, sh.seq, rows, scale, s, dp);
      }
      CUDA_CHECK(cudaGetLastError());
      // dQ_h = dS_g K_g (each query head written once)
      gemm_strided_batched(ctx, false, false, sh.seq, sh.d, sh.seq, sh.n_kv, 1.0, MatrixRef{ds, t, sh.seq, score_elems},
                           MatrixRef{at(k, kv_batch), t, kv_ld, sh.d}, 0.0,
                           MatrixRef{at(dq, q_batch + r * sh.d), t, q_ld, group * sh.d}, stream);
      // dK_g (+)= dS^T Q_h, dV_g (+)= P^T dO_h: the group's heads in order r = 0, 1, ...
      const double beta = r == 0 ? 0.0 : 1.0;
      gemm_strided_batched(ctx, true, false, sh.seq, sh.d, sh.seq, sh.n_kv, 1.0, MatrixRef{ds, t, sh.seq, score_elems},
                           MatrixRef{q_head, t, q_ld, group * sh.d}, beta, MatrixRef{dk_acc, DType::f32, kv_ld, sh.d},
                           stream);
      gemm_strided_batched(ctx, true, false, sh.seq, sh.d, sh.seq, sh.n_kv, 1.0, MatrixRef{p, t, sh.seq, score_elems},
                           MatrixRef{do_head, t, q_ld, group * sh.d}, beta, MatrixRef{dv_acc, DType::f32, kv_ld, sh.d},
                           stream);
    }
    if (bf16) {
      const unsigned grid = grid_for(kv_batch_elems, kThreads);
      ECHO_LAUNCH(grid, kThreads, 0, stream, f32_to_bf16_kernel)
      (static_cast<const float*>(dk_acc), reinterpret_cast<__nv_bfloat16*>(const_cast<char*>(at(dk, kv_batch))),
       kv_batch_elems);
      CUDA_CHECK(cudaGetLastError());
      ECHO_LAUNCH(grid, kThreads, 0, stream, f32_to_bf16_kernel)
      (static_cast<const float*>(dv_acc), reinterpret_cast<__nv_bfloat16*>(const_cast<char*>(at(dv, kv_batch))),
       kv_batch_elems);
      CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace echo::cuda
